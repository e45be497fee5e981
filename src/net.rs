//! Serving connections safely, shared by the server's ports and the agent's status port:
//! connection slots within the descriptor limit ([`accept`]) and HTTP/1.1 with a header-read
//! timeout ([`http`]), and this host's name ([`host_name`]).

pub(crate) mod accept;
pub(crate) mod http;

/// This host's name (the kernel's, as `hostname` prints it), if it has one.
pub(crate) fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}
