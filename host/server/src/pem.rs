//! Certificates and private keys read from PEM files, for the server's TLS
//! listener ([`crate::tls`]) and the CLI's client certificate alike. Every
//! error names the file and what is wrong with it, and never quotes a key's
//! contents.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context as _};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// The one cryptography provider of lockd's TLS, server and client: ring
/// (aws-lc-rs would need cmake and a C toolchain to build).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in the PEM file `path`, in order: a chain starts with
/// the end-entity certificate; a CA file may hold several roots. A file
/// holding none is an error.
pub fn certificates(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let bytes = read(path, "certificate")?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            anyhow!(
                "{} is not a PEM certificate file: {}",
                path.display(),
                describe(&e)
            )
        })?;
    if certs.is_empty() {
        anyhow::bail!(
            "{} holds no certificate (no -----BEGIN CERTIFICATE----- section)",
            path.display()
        );
    }
    Ok(certs)
}

/// The private key in the PEM file `path` (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let bytes = read(path, "private key")?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => anyhow!(
            "{} holds no private key (no -----BEGIN PRIVATE KEY----- section, or its RSA or EC \
             form)",
            path.display()
        ),
        other => anyhow!(
            "{} is not a PEM private key file: {}",
            path.display(),
            describe(&other)
        ),
    })
}

/// The certificate chain in `cert` with the private key in `key`, checked
/// to belong together and to be a key type the provider can sign with.
pub fn certified_key(cert: &Path, key: &Path) -> anyhow::Result<CertifiedKey> {
    let chain = certificates(cert)?;
    let private = private_key(key)?;
    CertifiedKey::from_der(chain, private, &provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => anyhow!(
            "the private key {} does not belong to the certificate {}",
            key.display(),
            cert.display()
        ),
        other => anyhow!(
            "the certificate {} with the private key {} cannot be used: {other}",
            cert.display(),
            key.display()
        ),
    })
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading the {what} file {}", path.display()))
}

/// What is wrong with a PEM file, without quoting any of it (a key file's
/// lines are secret).
fn describe(error: &pem::Error) -> String {
    match error {
        pem::Error::MissingSectionEnd { .. } => "a section has no -----END line".to_string(),
        pem::Error::IllegalSectionStart { .. } => "a malformed -----BEGIN line".to_string(),
        pem::Error::Base64Decode(_) => "a section's base64 does not decode".to_string(),
        pem::Error::Io(e) => e.to_string(),
        pem::Error::NoItemsFound => "no section of the expected kind".to_string(),
        pem::Error::SectionTooLarge => "a section is too large".to_string(),
        other => format!("unreadable PEM ({other:?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_LINE: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg";

    #[test]
    fn errors_name_the_file_and_never_quote_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        let e = certificates(&garbage).unwrap_err().to_string();
        assert!(
            e.contains("garbage.pem") && e.contains("holds no certificate"),
            "{e}"
        );

        let broken = dir.path().join("broken.key");
        std::fs::write(
            &broken,
            format!("-----BEGIN PRIVATE KEY-----\n{KEY_LINE}\n"),
        )
        .unwrap();
        let e = format!("{:#}", private_key(&broken).unwrap_err());
        assert!(e.contains("broken.key") && e.contains("no -----END"), "{e}");
        assert!(!e.contains(KEY_LINE), "{e}");

        let missing = dir.path().join("missing.pem");
        let e = format!("{:#}", certificates(&missing).unwrap_err());
        assert!(
            e.contains("missing.pem") && e.contains("No such file"),
            "{e}"
        );
    }
}
