//! The TLS client configuration of one extender from its `tlsConfig`, as upstream builds it:
//! PEM data (base64 in the file) before files, client certificates when given, and the server's
//! certificate not verified when `insecure` is set or `enableHTTPS` is set without a CA.

use std::sync::Arc;

use base64::Engine;
use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};
use unisched_framework::config::Extender;

/// Why an extender's TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A `…Data` field is not base64.
    #[error("tlsConfig.{field}: not base64")]
    Base64 {
        /// The field.
        field: &'static str,
        /// Why.
        #[source]
        source: base64::DecodeError,
    },
    /// A file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// PEM that holds no certificate or key, or does not parse.
    #[error("tlsConfig.{field}: no usable PEM {what}")]
    Pem {
        /// The field.
        field: &'static str,
        /// Certificate or key.
        what: &'static str,
    },
    /// A client certificate without its key, or a key without its certificate.
    #[error("tlsConfig: a client certificate and its key must be given together")]
    HalfClientCert,
    /// rustls refused the configuration.
    #[error("building the TLS configuration")]
    Rustls(#[source] rustls::Error),
    /// `serverName` is not a DNS name or IP address.
    #[error("tlsConfig.serverName {0:?} is not a valid server name")]
    ServerName(String),
}

/// PEM bytes from the `…Data` field (base64) or else the file; `None` when neither is set.
fn pem_bytes(data: &str, file: &str, field: &'static str) -> Result<Option<Vec<u8>>, TlsError> {
    if !data.is_empty() {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .map_err(|source| TlsError::Base64 { field, source });
    }
    if !file.is_empty() {
        return std::fs::read(file).map(Some).map_err(|source| TlsError::Read {
            path: file.to_string(),
            source,
        });
    }
    Ok(None)
}

fn certificates(pem: &[u8], field: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::Pem {
            field,
            what: "certificate",
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            field,
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The rustls configuration for `extender`, and the server name to check when `serverName` is set.
pub(crate) fn client_config(
    extender: &Extender,
) -> Result<(ClientConfig, Option<ServerName<'static>>), TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = extender.tls_config.clone().unwrap_or_default();
    let ca = pem_bytes(&tls.ca_data, &tls.ca_file, "caData")?;
    let insecure = tls.insecure || (extender.enable_https && ca.is_none());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServer(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        match &ca {
            Some(pem) => {
                for cert in certificates(pem, "caData")? {
                    roots.add(cert).map_err(TlsError::Rustls)?;
                }
            }
            None => {
                // No CA given: the system's, as Go's default transport uses.
                for cert in rustls_native_roots() {
                    let _ = roots.add(cert);
                }
            }
        }
        builder.with_root_certificates(roots)
    };
    let cert = pem_bytes(&tls.cert_data, &tls.cert_file, "certData")?;
    let key = pem_bytes(&tls.key_data, &tls.key_file, "keyData")?;
    let config = match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain = certificates(&cert, "certData")?;
            let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| TlsError::Pem {
                field: "keyData",
                what: "private key",
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(TlsError::Rustls)?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err(TlsError::HalfClientCert),
    };
    let server_name = if tls.server_name.is_empty() {
        None
    } else {
        Some(
            ServerName::try_from(tls.server_name.clone())
                .map_err(|_| TlsError::ServerName(tls.server_name.clone()))?,
        )
    };
    Ok((config, server_name))
}

/// The platform's trusted roots; none when they cannot be read (then only a configured CA works).
fn rustls_native_roots() -> Vec<CertificateDer<'static>> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!(error = %e, "reading the system's trusted certificates");
    }
    found.certs
}

/// Accepts any server certificate while still checking the handshake's signatures: upstream's
/// `Insecure`, for an extender reached over HTTPS without a CA.
#[derive(Debug)]
struct AcceptAnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
