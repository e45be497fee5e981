//! Why the server ends a stream, and who it ends it for: the one place where a stream's
//! refusal becomes a gRPC status, a reason label and what its log line says.

use std::net::SocketAddr;

use tonic::Status;

use super::RequestError;
use super::wire::ReadError;
use crate::xds::proxy::{IdentityError, ProxyError};

/// The address a stream's connection came from, put in each request's extensions by the
/// accept loop (`server`), for logs and `/debug/syncz`.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

/// Why a stream was closed by the server. Turned into a `tonic::Status` in one place.
#[derive(Debug, thiserror::Error)]
pub(super) enum StreamError {
    #[error("the first request of a stream must carry the node")]
    NoNode,
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    #[error("the secure port serves ADS only to clients with a certificate of this mesh")]
    NoCertificate,
    /// Boxed: every stream's task keeps room for its error.
    #[error(transparent)]
    Identity(Box<IdentityError>),
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("too many new xDS streams: more than --max-new-streams-per-second; retry later")]
    Busy,
    #[error("{0}; reconnect")]
    Ended(&'static str),
    #[error(
        "the client took none of its responses for {0:?} (--push-send-timeout); closing its connection"
    )]
    Stalled(std::time::Duration),
}

impl StreamError {
    /// The `reason` label of `wayfinder_xds_refused_streams_total`.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Self::Busy => "rate",
            Self::Read(ReadError::Budget { .. }) => "budget",
            Self::Read(ReadError::TooLarge { .. }) => "size",
            Self::Read(ReadError::TooManyNames { .. })
            | Self::Request(RequestError::TooManySubscribed { .. }) => "names",
            Self::Read(ReadError::Compressed) => "compressed",
            Self::Read(ReadError::Slow(_) | ReadError::Silent(_)) => "slow",
            Self::Read(ReadError::NodeId { .. } | ReadError::NodeMetadata { .. })
            | Self::NoNode
            | Self::Proxy(_) => "node",
            Self::NoCertificate | Self::Identity(_) => "identity",
            Self::Read(_) | Self::Request(_) => "malformed",
            Self::Ended(_) => "ended",
            Self::Stalled(_) => "stalled",
        }
    }

    /// True for what istiod counts in `pilot_total_xds_internal_errors`: a request stream that
    /// failed other than by its client leaving, which grpc-go reports to istiod as an
    /// unexpected receive error (a message that does not decode, a stream cut in the middle
    /// of one). Refusals for a limit of wayfinder's own are not: istiod has no such limits.
    pub(super) fn is_internal(&self) -> bool {
        matches!(
            self,
            Self::Read(ReadError::Malformed(_) | ReadError::Truncated)
        )
    }

    /// True when the client went away or the connection ended the stream: nothing to refuse.
    pub(super) fn is_quiet(&self) -> bool {
        matches!(self, Self::Ended(_) | Self::Read(ReadError::Reset(_)))
    }
}

impl From<StreamError> for Status {
    fn from(err: StreamError) -> Self {
        let message = err.to_string();
        match err {
            StreamError::Busy | StreamError::Request(RequestError::TooManySubscribed { .. }) => {
                Status::resource_exhausted(message)
            }
            StreamError::Read(read) => match read {
                ReadError::Compressed => Status::unimplemented(message),
                ReadError::TooLarge { .. }
                | ReadError::Budget { .. }
                | ReadError::TooManyNames { .. }
                | ReadError::NodeMetadata { .. }
                | ReadError::Slow(_)
                | ReadError::Silent(_) => Status::resource_exhausted(message),
                ReadError::Reset(status) => status,
                ReadError::NodeId { .. }
                | ReadError::LongField { .. }
                | ReadError::Malformed(_)
                | ReadError::Truncated => Status::invalid_argument(message),
            },
            StreamError::Ended(_) | StreamError::Stalled(_) => Status::unavailable(message),
            StreamError::NoCertificate => Status::unauthenticated(message),
            StreamError::Identity(_) => Status::permission_denied(message),
            StreamError::NoNode | StreamError::Proxy(_) | StreamError::Request(_) => {
                Status::invalid_argument(message)
            }
        }
    }
}

/// Who is at the other end of a stream, as far as it is known, for its log lines.
#[derive(Default)]
pub(super) struct Peer {
    pub(super) addr: Option<SocketAddr>,
    /// The node id, cut to [`super::clip::NODE_ID`], once the first request named it.
    pub(super) node: Option<String>,
}

impl Peer {
    pub(super) fn addr(&self) -> String {
        self.addr.map_or_else(|| "-".to_string(), |a| a.to_string())
    }
}
