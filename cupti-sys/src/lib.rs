//! Raw CUPTI bindings.
//!
//! **Status: placeholder, no bindings yet.** The bindgen output over the real
//! CUPTI 12.x/13.x headers, committed together with the script that makes it,
//! arrives with the agent issue (#3).
