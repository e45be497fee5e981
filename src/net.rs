//! Serving connections safely, shared by the server's ports and the agent's status port:
//! connection slots within the descriptor limit ([`accept`]) and HTTP/1.1 with a header-read
//! timeout ([`http`]).

pub(crate) mod accept;
pub(crate) mod http;
