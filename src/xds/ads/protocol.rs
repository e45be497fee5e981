//! What the stream loop needs from a protocol variant's state machine, implemented for state
//! of the world ([`StreamState`]) and delta ([`DeltaState`]).

use std::sync::Arc;

use super::wire::{DeltaResponse, Encoded, RequestMessage, SotwRequest, SotwResponse};
use super::{DeltaState, Outcome, RequestError, StreamState, TypeStatus};
use crate::xds::pb::core::Node;
use crate::xds::pb::discovery::DeltaDiscoveryRequest;
use crate::xds::proxy::Proxy;
use crate::xds::{PerType, TypeUrl, XdsSnapshot};

/// A response in the few words logs and metrics need.
pub(super) struct Summary {
    pub(super) type_url: TypeUrl,
    pub(super) version: String,
    pub(super) nonce: String,
    pub(super) resources: usize,
    pub(super) removed: usize,
    pub(super) bytes: usize,
}

impl Summary {
    /// A response's summary: its own fields, and the count and bytes of its resources as
    /// `encoded` measured them.
    fn new(
        type_url: TypeUrl,
        version: String,
        nonce: String,
        removed: usize,
        encoded: &Encoded,
    ) -> Self {
        Self {
            type_url,
            version,
            nonce,
            resources: encoded.resources(),
            removed,
            bytes: encoded.resource_bytes(),
        }
    }
}

/// What a stream needs from a protocol variant's state machine (state of the world or delta).
pub(super) trait Protocol: Send + Sized + 'static {
    type Request: RequestMessage + Send + 'static;
    type Response: Send + 'static;
    /// For logs: `sotw` or `delta`.
    const VARIANT: &'static str;
    fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self;
    /// Limits the names a stream may be subscribed to per type, where requests add to the
    /// subscription (delta); state-of-the-world requests replace it, within the per-request
    /// limit.
    fn with_max_names(self, _max: usize) -> Self {
        self
    }
    fn node(req: &Self::Request) -> Option<&Node>;
    fn request_type_and_nonce(req: &Self::Request) -> (&str, &str);
    /// The request's `error_detail` message, if it has one.
    fn error_detail(req: &Self::Request) -> Option<&str>;
    /// The response as it is written, and its summary: its resources are counted as they are
    /// measured for encoding (a walk of the snapshot's layers when they are not listed).
    fn encode(response: Self::Response) -> (Summary, Encoded);
    fn proxy(&self) -> &Arc<Proxy>;
    /// Refreshes the debug copy of the per-type state.
    fn status_into(&self, out: &mut PerType<TypeStatus>);
    fn on_request(
        &mut self,
        req: &Self::Request,
        snap: &XdsSnapshot,
    ) -> Result<Outcome<Self::Response>, RequestError>;
    fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<Self::Response>;
}

impl Protocol for StreamState {
    type Request = SotwRequest;
    type Response = SotwResponse;
    const VARIANT: &'static str = "sotw";
    fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self {
        StreamState::new(proxy, identifier)
    }
    fn node(req: &SotwRequest) -> Option<&Node> {
        req.request.node.as_ref()
    }
    fn request_type_and_nonce(req: &SotwRequest) -> (&str, &str) {
        (&req.request.type_url, &req.request.response_nonce)
    }
    fn error_detail(req: &SotwRequest) -> Option<&str> {
        req.request
            .error_detail
            .as_ref()
            .map(|s| s.message.as_str())
    }
    fn encode(r: SotwResponse) -> (Summary, Encoded) {
        let (type_url, version, nonce) = (r.type_url, r.version_info.clone(), r.nonce.clone());
        let encoded = r.encode();
        (Summary::new(type_url, version, nonce, 0, &encoded), encoded)
    }
    fn proxy(&self) -> &Arc<Proxy> {
        StreamState::proxy(self)
    }
    fn status_into(&self, out: &mut PerType<TypeStatus>) {
        StreamState::status_into(self, out);
    }
    fn on_request(
        &mut self,
        req: &SotwRequest,
        snap: &XdsSnapshot,
    ) -> Result<Outcome, RequestError> {
        StreamState::on_request(self, req, snap)
    }
    fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<SotwResponse> {
        StreamState::on_snapshot(self, snap)
    }
}

impl Protocol for DeltaState {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaResponse;
    const VARIANT: &'static str = "delta";
    fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self {
        DeltaState::new(proxy, identifier)
    }
    fn with_max_names(self, max: usize) -> Self {
        DeltaState::with_max_names(self, max)
    }
    fn node(req: &DeltaDiscoveryRequest) -> Option<&Node> {
        req.node.as_ref()
    }
    fn request_type_and_nonce(req: &DeltaDiscoveryRequest) -> (&str, &str) {
        (&req.type_url, &req.response_nonce)
    }
    fn error_detail(req: &DeltaDiscoveryRequest) -> Option<&str> {
        req.error_detail.as_ref().map(|s| s.message.as_str())
    }
    fn encode(r: DeltaResponse) -> (Summary, Encoded) {
        let (type_url, removed) = (r.type_url, r.removed.len());
        let (version, nonce) = (r.system_version_info.clone(), r.nonce.clone());
        let encoded = r.encode();
        (
            Summary::new(type_url, version, nonce, removed, &encoded),
            encoded,
        )
    }
    fn proxy(&self) -> &Arc<Proxy> {
        DeltaState::proxy(self)
    }
    fn status_into(&self, out: &mut PerType<TypeStatus>) {
        DeltaState::status_into(self, out);
    }
    fn on_request(
        &mut self,
        req: &DeltaDiscoveryRequest,
        snap: &XdsSnapshot,
    ) -> Result<Outcome<DeltaResponse>, RequestError> {
        DeltaState::on_request(self, req, snap)
    }
    fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<DeltaResponse> {
        DeltaState::on_snapshot(self, snap)
    }
}
