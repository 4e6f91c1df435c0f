//! What a Kineto trace event is from its `ph` and `cat` alone, before its other
//! members are read: a leaf module that the parsers (`event`, `skeleton`) and the
//! mapper (`map`) share.

use gputrace_format::ApiDomain;

/// Whether the mapper (`map::Mapper::map`) reads the `args` of an event of category `cat`.
pub(crate) fn reads_args(cat: &str) -> bool {
    matches!(
        cat,
        "kernel"
            | "Kernel"
            | "gpu_memcpy"
            | "Memcpy"
            | "gpu_memset"
            | "Memset"
            | "cuda_sync"
            | "cuda_runtime"
            | "Runtime"
            | "cuda_driver"
            | "Driver"
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Kernel,
    Memcpy,
    Memset,
    Sync,
    Api(ApiDomain),
    Marker,
}

/// What an element's `ph` and `cat` make it, before its other fields are
/// read: worked out once per skeleton (its `ph` and `cat` are fixed), or
/// per element read by the parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// An `ac2g` flow endpoint.
    Flow,
    /// `ph` "M".
    Metadata,
    /// One of the kinds mapped.
    Kind(Kind),
    /// A CPU operator (`cpu_op`, old schema `Operator`): a marker whose
    /// domain is its category (`ProfilerStep#N` among them).
    Operator,
    /// A category the model has no place for.
    Other,
}

impl Class {
    pub(crate) fn of(ph: &str, cat: &str) -> Class {
        if matches!(ph, "s" | "f" | "t") && matches!(cat, "ac2g" | "async_cpu_to_gpu" | "async") {
            return Class::Flow;
        }
        match (ph, cat) {
            ("M", _) => Class::Metadata,
            (_, "kernel" | "Kernel") => Class::Kind(Kind::Kernel),
            (_, "gpu_memcpy" | "Memcpy") => Class::Kind(Kind::Memcpy),
            (_, "gpu_memset" | "Memset") => Class::Kind(Kind::Memset),
            (_, "cuda_sync") => Class::Kind(Kind::Sync),
            (_, "cuda_runtime" | "Runtime") => Class::Kind(Kind::Api(ApiDomain::RUNTIME)),
            (_, "cuda_driver" | "Driver") => Class::Kind(Kind::Api(ApiDomain::DRIVER)),
            (_, "user_annotation" | "gpu_user_annotation") => Class::Kind(Kind::Marker),
            (_, "cpu_op" | "Operator") => Class::Operator,
            _ => Class::Other,
        }
    }
}
