//! The client CA and the front-proxy CA as they are now, not as they were at start-up.
//!
//! Why: both authorities rotate. A `--client-ca-file` or `--requestheader-client-ca-file` is
//! re-read when its modification time moves (as the serving certificate is, before each
//! handshake), and without those flags the bundles come from the API server's
//! `kube-system/extension-apiserver-authentication` ConfigMap and follow its updates
//! ([`crate::authentication_configmap`]). A bundle that fails to parse, or disappears, never
//! replaces a good one: it is better to keep trusting the old authority for a while than to
//! refuse every client.
//!
//! [`DynamicCa`] is one such bundle; [`DynamicClientVerifier`] is what the TLS handshake asks,
//! always the union of the current bundles.

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::SystemTime,
};

use parking_lot::{Mutex, RwLock};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    server::danger::{ClientCertVerified, ClientCertVerifier},
};
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::tls::{self, TlsError};

/// One parsed CA bundle: its PEM (to notice unchanged content), its roots and a verifier.
pub struct CaBundle {
    pem: Vec<u8>,
    roots: RootCertStore,
    verifier: Arc<dyn ClientCertVerifier>,
}

impl fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaBundle")
            .field("authorities", &self.roots.len())
            .finish()
    }
}

impl CaBundle {
    /// Parses `pem`; `origin` (a path, or the ConfigMap key) names it in errors.
    pub fn from_pem(origin: &Path, pem: &[u8]) -> Result<Self, TlsError> {
        let roots = tls::ca_roots(origin, pem)?;
        let verifier = tls::verifier(roots.clone())?;
        Ok(CaBundle {
            pem: pem.to_vec(),
            roots,
            verifier,
        })
    }

    /// The verifier of certificates chaining to this bundle.
    pub fn verifier(&self) -> &Arc<dyn ClientCertVerifier> {
        &self.verifier
    }
}

/// Where a bundle comes from.
#[derive(Debug)]
enum Origin {
    /// A file, with the modification time of the content loaded last.
    File {
        path: PathBuf,
        loaded: Mutex<Option<SystemTime>>,
    },
    /// Someone else sets it (the ConfigMap's watcher).
    Pushed { name: String },
}

/// A CA bundle that can change while the server runs; possibly empty (a ConfigMap not read yet).
#[derive(Debug)]
pub struct DynamicCa {
    origin: Origin,
    current: RwLock<Option<Arc<CaBundle>>>,
    /// Moves on every replacement, so that users of the bundle rebuild what they derived from it.
    generation: AtomicU64,
}

impl DynamicCa {
    /// The bundle of `path`, loaded now: a broken file at start-up is an error.
    pub fn from_file(path: &Path) -> Result<Arc<Self>, TlsError> {
        let modified = modified(path);
        let bundle = CaBundle::from_pem(path, &tls::read(path)?)?;
        Ok(Arc::new(DynamicCa {
            origin: Origin::File {
                path: path.to_path_buf(),
                loaded: Mutex::new(modified),
            },
            current: RwLock::new(Some(Arc::new(bundle))),
            generation: AtomicU64::new(1),
        }))
    }

    /// An empty bundle that [`DynamicCa::set_pem`] fills; `name` says which in logs.
    pub fn pushed(name: &str) -> Arc<Self> {
        Arc::new(DynamicCa {
            origin: Origin::Pushed {
                name: name.to_string(),
            },
            current: RwLock::new(None),
            generation: AtomicU64::new(0),
        })
    }

    /// The bundle now, if any.
    pub fn current(&self) -> Option<Arc<CaBundle>> {
        self.current.read().clone()
    }

    /// Changes every time the bundle is replaced.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn replace(&self, bundle: CaBundle) {
        *self.current.write() = Some(Arc::new(bundle));
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Replaces the bundle with `pem` when it differs. Content that does not parse keeps the old
    /// bundle; the error says why.
    pub fn set_pem(&self, pem: &[u8]) -> Result<bool, TlsError> {
        if self.current().is_some_and(|current| current.pem == pem) {
            return Ok(false);
        }
        let origin = match &self.origin {
            Origin::File { path, .. } => path.clone(),
            Origin::Pushed { name } => PathBuf::from(name),
        };
        self.replace(CaBundle::from_pem(&origin, pem)?);
        Ok(true)
    }

    /// For a file: re-reads it when its modification time moved. A file caught half-written, or
    /// broken, keeps the old bundle (and is tried again next time).
    pub fn reload_if_changed(&self) {
        let Origin::File { path, loaded } = &self.origin else {
            return;
        };
        let now = modified(path);
        if *loaded.lock() == now {
            return;
        }
        let result = tls::read(path).and_then(|pem| self.set_pem(&pem));
        match result {
            Ok(changed) => {
                *loaded.lock() = now;
                if changed {
                    tracing::info!(file = %path.display(), "reloaded a client CA bundle");
                }
            }
            Err(error) => tracing::warn!(%error, "keeping the previous client CA bundle"),
        }
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The union of the current bundles, rebuilt when one of them changed.
#[derive(Debug)]
struct Union {
    generations: Vec<u64>,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
}

/// The handshake's client-certificate check over bundles that change: a client certificate is
/// optional, one that is sent must chain to one of the current bundles.
///
/// Unlike a fixed verifier it names no acceptable authorities in the certificate request (the
/// list would have to be borrowed from a bundle that may be replaced meanwhile); clients then
/// offer their certificate whatever its issuer, which the check here still decides.
#[derive(Debug)]
pub struct DynamicClientVerifier {
    authorities: Vec<Arc<DynamicCa>>,
    union: Mutex<Union>,
}

impl DynamicClientVerifier {
    /// Checks certificates against `authorities` (the client CA, then the front-proxy CA).
    pub fn new(authorities: Vec<Arc<DynamicCa>>) -> Self {
        DynamicClientVerifier {
            authorities,
            union: Mutex::new(Union {
                generations: Vec::new(),
                verifier: None,
            }),
        }
    }

    /// Re-reads changed CA files (called before each handshake).
    pub fn reload_if_changed(&self) {
        for authority in &self.authorities {
            authority.reload_if_changed();
        }
    }

    /// The verifier of the current union, `None` while every bundle is empty.
    fn current(&self) -> Result<Option<Arc<dyn ClientCertVerifier>>, TlsError> {
        let generations: Vec<u64> = self.authorities.iter().map(|a| a.generation()).collect();
        let mut union = self.union.lock();
        if union.generations == generations {
            return Ok(union.verifier.clone());
        }
        let mut roots = RootCertStore::empty();
        for bundle in self.authorities.iter().filter_map(|a| a.current()) {
            roots.roots.extend(bundle.roots.roots.iter().cloned());
        }
        let verifier = if roots.is_empty() {
            None
        } else {
            Some(tls::verifier(roots)?)
        };
        *union = Union {
            generations,
            verifier: verifier.clone(),
        };
        Ok(verifier)
    }
}

impl ClientCertVerifier for DynamicClientVerifier {
    fn offer_client_auth(&self) -> bool {
        !self.authorities.is_empty()
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match self.current() {
            Ok(Some(verifier)) => verifier.verify_client_cert(end_entity, intermediates, now),
            Ok(None) => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
            Err(error) => Err(rustls::Error::General(error.to_string())),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            certificate,
            signature,
            &tls::provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            certificate,
            signature,
            &tls::provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        tls::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authority(name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap()
            .pem()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("unisched-client-ca-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_changed_file_replaces_the_bundle_and_a_broken_one_does_not() {
        let dir = temp_dir("file");
        let path = dir.join("ca.crt");
        let first = authority("first");
        std::fs::write(&path, &first).unwrap();
        let ca = DynamicCa::from_file(&path).unwrap();
        let generation = ca.generation();
        ca.reload_if_changed();
        assert_eq!(ca.generation(), generation, "an unchanged file is not re-read");

        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, authority("second")).unwrap();
        ca.reload_if_changed();
        assert_ne!(ca.generation(), generation);
        let second = ca.generation();

        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, "not a certificate").unwrap();
        ca.reload_if_changed();
        assert_eq!(ca.generation(), second, "broken content keeps the bundle");
        assert!(ca.current().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_file_at_start_up_is_an_error() {
        assert!(DynamicCa::from_file(Path::new("/nonexistent/ca.crt")).is_err());
    }

    #[test]
    fn pushed_content_replaces_only_when_it_differs_and_parses() {
        let ca = DynamicCa::pushed("client-ca-file");
        assert!(ca.current().is_none());
        let pem = authority("pushed");
        assert!(ca.set_pem(pem.as_bytes()).unwrap());
        assert!(
            !ca.set_pem(pem.as_bytes()).unwrap(),
            "the same content is no change"
        );
        assert!(ca.set_pem(b"garbage").is_err());
        assert_eq!(ca.current().unwrap().pem, pem.as_bytes());
    }

    #[test]
    fn the_union_follows_its_bundles() {
        let client = DynamicCa::pushed("client-ca-file");
        let proxy = DynamicCa::pushed("requestheader-client-ca-file");
        let verifier = DynamicClientVerifier::new(vec![client.clone(), proxy.clone()]);
        assert!(verifier.offer_client_auth());
        assert!(!verifier.client_auth_mandatory());
        assert!(verifier.current().unwrap().is_none(), "no roots yet");
        client.set_pem(authority("client").as_bytes()).unwrap();
        let first = verifier.current().unwrap().unwrap();
        assert!(
            Arc::ptr_eq(&first, &verifier.current().unwrap().unwrap()),
            "cached"
        );
        proxy.set_pem(authority("proxy").as_bytes()).unwrap();
        assert!(
            !Arc::ptr_eq(&first, &verifier.current().unwrap().unwrap()),
            "rebuilt"
        );
        assert!(!DynamicClientVerifier::new(Vec::new()).offer_client_auth());
    }
}
