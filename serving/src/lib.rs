//! An inference server's own metrics, scraped into gputrace series.
//!
//! vLLM and SGLang publish Prometheus metrics (requests, tokens, latency
//! histograms, queue depth, KV-cache usage) on their HTTP port. Under
//! `gputrace run` the launcher finds that port among those the job's process
//! tree listens on ([`discover`]), or takes the URL it is given, scrapes it
//! every second ([`scraper`]) with a plain blocking GET ([`http`]), reads the
//! text format ([`expo`]), keeps the engines' families ([`families`]) and
//! writes them as `serving.*` counter series
//! (`gputrace_format::metric::serving`) into a trace file of its own, on the
//! realtime clock the GPU timeline maps to. The scrape does not depend on the
//! CUDA capture: a server whose capture failed still gets its numbers.
//!
//! ```
//! use gputrace_serving::{expo, families};
//! let page = "vllm:num_requests_waiting{model_name=\"m\"} 4.0\n\
//!             vllm_generation_tokens_total{model_name=\"m\"} 1500.0\n";
//! let (samples, bad) = expo::parse(page, families::is_engine_sample);
//! let (engine, snap) = families::snapshot(&samples).unwrap();
//! assert_eq!((engine, bad), (families::Engine::Vllm, 0));
//! assert_eq!(snap.get("serving.requests_waiting"), Some(4));
//! assert_eq!(snap.get("serving.generation_tokens"), Some(1500));
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod discover;
pub mod expo;
pub mod families;
pub mod http;
pub mod scraper;

pub use scraper::{Config, Outcome, Scraper, Target};
