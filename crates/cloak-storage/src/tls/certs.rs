//! A private CA and certificates it signs: enough for a test deployment or a quick start, not a
//! substitute for an organisation's PKI. Keys are ECDSA P-256.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use super::TlsError;

/// What a certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Presented by a listener (the proxy to clients, `cloak server` to proxies).
    Server,
    /// Presented by a connecting peer (a client to the proxy, the proxy to `cloak server`).
    Client,
}

/// A certificate and its private key, both PEM.
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

/// A certificate authority that lives in memory.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new CA with its own random key.
    pub fn new(name: &str) -> Result<Self, TlsError> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Self { issuer })
    }

    /// The CA's certificate, for `--tls-ca`, `--client-ca`, `--cacert`.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses; the first is also its common name),
    /// valid from now for `valid_for`.
    pub fn issue(
        &self,
        names: &[&str],
        role: Role,
        valid_for: Duration,
    ) -> Result<Issued, TlsError> {
        let now = SystemTime::now();
        self.issue_between(names, role, now - Duration::from_secs(60), now + valid_for)
    }

    /// A certificate valid only between `not_before` and `not_after` (tests make expired ones).
    pub fn issue_between(
        &self,
        names: &[&str],
        role: Role,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<Issued, TlsError> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *first);
        }
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![match role {
            Role::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Role::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The files [`write_quick_start`] makes.
pub struct QuickStart {
    /// The CA certificate: what clients trust, and what listeners check client certificates
    /// against.
    pub ca: PathBuf,
    /// The listeners' certificate and key.
    pub server: (PathBuf, PathBuf),
    /// The connecting peers' certificate and key.
    pub client: (PathBuf, PathBuf),
}

/// How long quick-start certificates are valid.
pub const QUICK_START_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Writes a new CA's certificate, a server certificate for `names` (and loopback) and a client
/// certificate into `dir` as `ca.pem`, `server.pem`/`server.key`, `client.pem`/`client.key`.
/// The CA's key is not kept: to issue more, run it again. Keys are written owner-only.
pub fn write_quick_start(dir: &Path, names: &[&str]) -> Result<QuickStart, TlsError> {
    let ca = TestCa::new("Cloak test CA")?;
    // The names asked for first: the first becomes the certificate's common name.
    let mut server_names = names.to_vec();
    for loopback in ["localhost", "127.0.0.1", "::1"] {
        if !server_names.contains(&loopback) {
            server_names.push(loopback);
        }
    }
    let server = ca.issue(&server_names, Role::Server, QUICK_START_VALIDITY)?;
    let client = ca.issue(&["cloak-client"], Role::Client, QUICK_START_VALIDITY)?;
    std::fs::create_dir_all(dir).map_err(|error| TlsError::File {
        path: dir.to_owned(),
        error,
    })?;
    let files = QuickStart {
        ca: dir.join("ca.pem"),
        server: (dir.join("server.pem"), dir.join("server.key")),
        client: (dir.join("client.pem"), dir.join("client.key")),
    };
    write(&files.ca, &ca.cert_pem(), false)?;
    write(&files.server.0, &server.cert_pem, false)?;
    write(&files.server.1, &server.key_pem, true)?;
    write(&files.client.0, &client.cert_pem, false)?;
    write(&files.client.1, &client.key_pem, true)?;
    Ok(files)
}

fn write(path: &Path, text: &str, secret: bool) -> Result<(), TlsError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    options
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|error| TlsError::File {
            path: path.to_owned(),
            error,
        })
}
