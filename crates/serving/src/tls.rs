//! The TLS side of secure serving: the serving certificate and the trust in client certificates.
//!
//! The serving certificate comes from `--tls-cert-file`/`--tls-private-key-file`, re-read when
//! either file changes (cert-manager and kubelets rotate them in place; a restart must not be
//! needed), or is self-signed for `localhost`, `127.0.0.1` and the host name, kept in memory or
//! written to `--cert-dir` and reused from there. Only TLS 1.2 and 1.3 are offered.
//!
//! Client certificates are optional, but one that is sent must chain to the client CA or to the
//! front-proxy CA as they are at that handshake ([`crate::client_ca`]): anything else fails the
//! handshake, before a request is read.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::SystemTime,
};

use parking_lot::Mutex;
use rustls::{
    RootCertStore, ServerConfig,
    crypto::CryptoProvider,
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier, danger::ClientCertVerifier},
    sign::CertifiedKey,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

/// The base name of the self-signed pair written to `--cert-dir` (`unisched.crt`, `unisched.key`).
pub const PAIR_NAME: &str = "unisched";

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// A PEM file holds no usable certificate or key.
    #[error("{}: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// Only one of `--tls-cert-file` and `--tls-private-key-file` was given.
    #[error("--tls-cert-file and --tls-private-key-file must be given together")]
    HalfAPair,
    /// The self-signed certificate could not be made.
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[source] rcgen::Error),
    /// rustls refused the key or the configuration.
    #[error("{0}")]
    Rustls(#[source] rustls::Error),
    /// A client CA bundle could not be turned into a verifier.
    #[error("client certificate verifier: {0}")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
}

/// The crypto provider of the whole process: ring, as kube's client uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_path_buf(),
            source,
        })?;
    if certificates.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            source: rustls_pki_types::pem::Error::NoItemsFound,
        });
    }
    Ok(certificates)
}

/// A certificate chain and its key, from PEM.
pub fn certified_key(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
) -> Result<CertifiedKey, TlsError> {
    let chain = certificates(cert_path, cert_pem)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|source| TlsError::Pem {
        path: key_path.to_path_buf(),
        source,
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(TlsError::Rustls)
}

/// A PEM certificate and key.
#[derive(Clone, Debug)]
pub struct PemPair {
    /// The certificate, PEM.
    pub certificate: String,
    /// The private key, PEM (PKCS#8).
    pub key: String,
}

/// A self-signed serving certificate for `localhost`, `127.0.0.1` and `host` (when not empty).
pub fn self_signed(host: &str) -> Result<PemPair, TlsError> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !host.is_empty() && !names.iter().any(|n| n == host) {
        names.push(host.to_string());
    }
    let certified = rcgen::generate_simple_self_signed(names).map_err(TlsError::Generate)?;
    Ok(PemPair {
        certificate: certified.cert.pem(),
        key: certified.signing_key.serialize_pem(),
    })
}

/// This machine's host name (the pod name in a cluster), or empty.
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertificateSource {
    /// PEM files, re-read when they change.
    Files {
        /// The certificate chain.
        certificate: PathBuf,
        /// The private key.
        key: PathBuf,
    },
    /// A certificate made at start-up, kept in memory.
    InMemory(PemPair),
}

impl CertificateSource {
    /// kube-scheduler's choice: the given files; else `<cert_dir>/unisched.crt|.key`, generated
    /// there when missing; else (no `cert_dir`) a self-signed certificate in memory.
    pub fn resolve(
        cert_file: Option<&Path>,
        key_file: Option<&Path>,
        cert_dir: Option<&Path>,
    ) -> Result<Self, TlsError> {
        match (cert_file, key_file) {
            (Some(certificate), Some(key)) => {
                return Ok(CertificateSource::Files {
                    certificate: certificate.to_path_buf(),
                    key: key.to_path_buf(),
                });
            }
            (None, None) => {}
            _ => return Err(TlsError::HalfAPair),
        }
        let Some(dir) = cert_dir.filter(|d| !d.as_os_str().is_empty()) else {
            return Ok(CertificateSource::InMemory(self_signed(&host_name())?));
        };
        let certificate = dir.join(format!("{PAIR_NAME}.crt"));
        let key = dir.join(format!("{PAIR_NAME}.key"));
        if !(certificate.exists() && key.exists()) {
            let pair = self_signed(&host_name())?;
            let io = |path: &Path| {
                let path = path.to_path_buf();
                move |source| TlsError::Io { path, source }
            };
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            std::fs::write(&certificate, &pair.certificate).map_err(io(&certificate))?;
            write_private(&key, pair.key.as_bytes()).map_err(io(&key))?;
            tracing::info!(certificate = %certificate.display(), "generated a self-signed serving certificate");
        }
        Ok(CertificateSource::Files { certificate, key })
    }
}

/// Writes a file only its owner can read.
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(contents)
}

/// The modification times that say whether the files changed.
type Stamps = (Option<SystemTime>, Option<SystemTime>);

fn stamps(certificate: &Path, key: &Path) -> Stamps {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (modified(certificate), modified(key))
}

/// Hands rustls the current serving certificate; [`ReloadingCertificate::reload_if_changed`]
/// re-reads the files when their modification times moved.
#[derive(Debug)]
pub struct ReloadingCertificate {
    source: CertificateSource,
    current: Mutex<(Arc<CertifiedKey>, Stamps)>,
}

impl ReloadingCertificate {
    /// Loads the certificate now: a broken pair at start-up is an error, not a silent fallback.
    pub fn new(source: CertificateSource) -> Result<Self, TlsError> {
        let (key, stamps) = Self::load(&source)?;
        Ok(ReloadingCertificate {
            source,
            current: Mutex::new((Arc::new(key), stamps)),
        })
    }

    fn load(source: &CertificateSource) -> Result<(CertifiedKey, Stamps), TlsError> {
        match source {
            CertificateSource::Files { certificate, key } => {
                let stamps = stamps(certificate, key);
                let loaded = certified_key(certificate, &read(certificate)?, key, &read(key)?)?;
                Ok((loaded, stamps))
            }
            CertificateSource::InMemory(pair) => {
                let key = certified_key(
                    Path::new("<self-signed certificate>"),
                    pair.certificate.as_bytes(),
                    Path::new("<self-signed key>"),
                    pair.key.as_bytes(),
                )?;
                Ok((key, (None, None)))
            }
        }
    }

    /// Re-reads changed files. A pair caught half-written, or broken, keeps the old certificate
    /// (and is tried again on the next call).
    pub fn reload_if_changed(&self) {
        let CertificateSource::Files { certificate, key } = &self.source else {
            return;
        };
        let now = stamps(certificate, key);
        if self.current.lock().1 == now {
            return;
        }
        match Self::load(&self.source) {
            Ok((loaded, stamps)) => {
                *self.current.lock() = (Arc::new(loaded), stamps);
                tracing::info!(certificate = %certificate.display(), "reloaded the serving certificate");
            }
            Err(error) => {
                tracing::warn!(%error, "keeping the previous serving certificate");
            }
        }
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.lock().0.clone()
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The CA certificates of a PEM bundle; `origin` (a file, or a ConfigMap key) names it in errors.
pub fn ca_roots(origin: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(origin, pem)? {
        roots.add(certificate).map_err(TlsError::Rustls)?;
    }
    Ok(roots)
}

/// A verifier that accepts certificates chaining to `roots`.
pub fn verifier(roots: RootCertStore) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(TlsError::Verifier)
}

/// TLS 1.2+ with the reloading certificate and the client verifier; HTTP/2 and HTTP/1.1 over
/// ALPN, in that order of preference, as Go's server offers them.
pub fn server_config(
    certificate: Arc<ReloadingCertificate>,
    client_verifier: Arc<dyn ClientCertVerifier>,
) -> Result<ServerConfig, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Rustls)?
        .with_client_cert_verifier(client_verifier)
        .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cert_dir_gets_a_pair_once_and_reuses_it() {
        let dir = std::env::temp_dir().join(format!("unisched-serving-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = CertificateSource::resolve(None, None, Some(&dir)).unwrap();
        let CertificateSource::Files { certificate, key } = &first else {
            panic!("expected files, got {first:?}");
        };
        assert!(certificate.ends_with("unisched.crt") && key.ends_with("unisched.key"));
        let pem = std::fs::read(certificate).unwrap();
        CertificateSource::resolve(None, None, Some(&dir)).unwrap();
        assert_eq!(
            std::fs::read(certificate).unwrap(),
            pem,
            "an existing pair is reused"
        );
        ReloadingCertificate::new(first).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn half_a_pair_is_refused() {
        let err = CertificateSource::resolve(Some(Path::new("/x.crt")), None, None).unwrap_err();
        assert!(matches!(err, TlsError::HalfAPair));
    }

    #[test]
    fn changed_files_are_reloaded() {
        let dir = std::env::temp_dir().join(format!("unisched-serving-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (certificate, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let first = self_signed("first").unwrap();
        std::fs::write(&certificate, &first.certificate).unwrap();
        std::fs::write(&key, &first.key).unwrap();
        let reloading = ReloadingCertificate::new(CertificateSource::Files {
            certificate: certificate.clone(),
            key: key.clone(),
        })
        .unwrap();
        let before = reloading.current().cert[0].clone();
        reloading.reload_if_changed();
        assert_eq!(
            reloading.current().cert[0],
            before,
            "unchanged files are not re-read"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = self_signed("second").unwrap();
        std::fs::write(&certificate, &second.certificate).unwrap();
        std::fs::write(&key, &second.key).unwrap();
        reloading.reload_if_changed();
        assert_ne!(reloading.current().cert[0], before);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
