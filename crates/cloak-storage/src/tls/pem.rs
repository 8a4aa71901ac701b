//! Certificates, keys and CA bundles from PEM files.

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::File {
        path: path.to_owned(),
        error,
    })
}

fn pem_error(path: &Path, what: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        what: what.into(),
    }
}

/// Every certificate in `path` (a certificate and the chain up to its CA), in order.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| pem_error(path, format!("malformed certificate: {error}")))?;
    if certs.is_empty() {
        return Err(pem_error(path, "no CERTIFICATE in the file"));
    }
    Ok(certs)
}

/// The private key in `path` (PKCS#8, PKCS#1 or SEC1), refused before it is read if others
/// than its owner may read or change it: whoever reads it can pose as this side of the link.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    refuse_exposed_key(path)?;
    let text = read(path)?;
    PrivateKeyDer::from_pem_slice(&text)
        .map_err(|error| pem_error(path, format!("no usable PRIVATE KEY: {error}")))
}

/// Refuses the private key file `path` if others than its owner may read or change it.
pub(crate) fn refuse_exposed_key(path: &Path) -> Result<(), TlsError> {
    let file = |error| TlsError::File {
        path: path.to_owned(),
        error,
    };
    match crate::private_file::exposed_mode(path).map_err(file)? {
        Some(mode) => Err(TlsError::KeyNotPrivate {
            path: path.to_owned(),
            mode,
        }),
        None => Ok(()),
    }
}

/// The CA certificates in `path` as trust anchors.
pub fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots
            .add(cert)
            .map_err(|error| pem_error(path, format!("not a usable CA certificate: {error}")))?;
    }
    Ok(roots)
}
