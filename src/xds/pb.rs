//! Envoy's API types, from the `envoy-types` crate, and the one Istio message served over
//! ADS ([`mesh`]).
//!
//! Everything else in wayfinder reaches Envoy's generated types through this module, so that
//! swapping the crate that provides them touches one file.

pub use envoy_types::pb::envoy::config::cluster::v3 as cluster;
pub use envoy_types::pb::envoy::config::core::v3 as core;
pub use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;
pub use envoy_types::pb::envoy::config::listener::v3 as listener;
pub use envoy_types::pb::envoy::config::rbac::v3 as rbac;
pub use envoy_types::pb::envoy::config::route::v3 as route;
pub use envoy_types::pb::envoy::extensions::filters::common::fault::v3 as common_fault;
pub use envoy_types::pb::envoy::extensions::filters::http::cors::v3 as cors;
pub use envoy_types::pb::envoy::extensions::filters::http::fault::v3 as fault;
pub use envoy_types::pb::envoy::extensions::filters::http::jwt_authn::v3 as jwt_authn;
pub use envoy_types::pb::envoy::extensions::filters::http::rbac::v3 as http_rbac;
pub use envoy_types::pb::envoy::extensions::filters::http::router::v3 as router;
pub use envoy_types::pb::envoy::extensions::filters::listener::original_dst::v3 as original_dst;
pub use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3 as tls_inspector;
pub use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
pub use envoy_types::pb::envoy::extensions::filters::network::rbac::v3 as network_rbac;
pub use envoy_types::pb::envoy::extensions::filters::network::sni_cluster::v3 as sni_cluster;
pub use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp_proxy;
pub use envoy_types::pb::envoy::extensions::path::r#match::uri_template::v3 as uri_template;
pub use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3 as previous_hosts;
pub use envoy_types::pb::envoy::extensions::transport_sockets::raw_buffer::v3 as raw_buffer;
pub use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
pub use envoy_types::pb::envoy::extensions::upstreams::http::v3 as upstream_http;
pub use envoy_types::pb::envoy::service::discovery::v3 as discovery;
pub use envoy_types::pb::envoy::service::secret::v3 as secret;
pub use envoy_types::pb::envoy::r#type::matcher::v3 as matcher;
pub use envoy_types::pb::envoy::r#type::v3 as types;
pub use envoy_types::pb::google::protobuf;
pub use envoy_types::pb::google::rpc;

pub mod mesh;
