//! HTTPS for the scheduler's own endpoints (`/metrics`, `/healthz`, `/livez`, `/readyz`, `/configz`),
//! with authentication and authorization delegated to the API server, as kube-scheduler serves them.
//!
//! Why: `/configz` is the whole effective configuration and `/metrics` tells a lot about the
//! cluster; neither may be readable by anyone who reaches the pod. A request goes through:
//!
//! 1. TLS ([`tls`]): a given certificate and key (reloaded when the files change) or a self-signed
//!    one; HTTP/2 or HTTP/1.1 by ALPN. Client certificates are checked against the client CA and
//!    the front-proxy CA during the handshake ([`client_ca`]: files reloaded when they change, or
//!    the API server's ConfigMap, followed by [`authentication_configmap`]), so a certificate from
//!    another authority never gets a connection.
//! 2. Always-allowed paths (`/healthz`, `/readyz`, `/livez` by default) skip the rest: a kubelet
//!    probes them without credentials.
//! 3. Authentication ([`authn`]): front-proxy headers, then the client certificate, then a bearer
//!    token checked with a `TokenReview`; without credentials the user is `system:anonymous`.
//! 4. Authorization ([`authz`]): a `SubjectAccessReview` for the non-resource path and verb.
//!
//! [`options::SecureServingOptions`] carries kube-scheduler's flags; [`server`] runs the accept loop.

#![forbid(unsafe_code)]

pub mod authentication_configmap;
pub mod authn;
pub mod authz;
pub mod cache;
pub mod client_ca;
pub mod options;
pub mod response;
pub mod server;
pub mod tls;

pub use authn::{Authenticator, UserInfo};
pub use authz::{Authorizer, Decision};
pub use options::{SecureServingBuilder, SecureServingOptions};
pub use server::{Guard, SecureServer};
