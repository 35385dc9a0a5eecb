//! TLS for the CLI's client: what an `https://` server is checked against
//! (the system's roots, or `--cacert`), the client certificate it is shown
//! (`--cert`, `--key`), and what a failed handshake means for the user.
//!
//! A certificate that is not trusted, names another host or has expired is
//! a failure that says so (exit 3); the client never retries over plain
//! HTTP. The configuration built here serves every host of `--server`.

use std::path::Path;
use std::sync::Arc;

use lockd_server::pem;
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};
use rustls_platform_verifier::BuilderVerifierExt as _;

use super::failure::{fail, Failure};
use super::flags::ClientTls;

/// The TLS settings `flags` ask for; `None` when they ask for nothing (the
/// transport then checks `https://` servers against the system's roots). A
/// file that cannot be used is a usage error (exit 2) naming it.
pub fn config(flags: &ClientTls) -> Result<Option<Arc<ClientConfig>>, Failure> {
    if flags.cacert.is_none() && flags.cert.is_none() && flags.key.is_none() {
        return Ok(None);
    }
    let unusable = |e: rustls::Error| fail(2, format!("cannot set up TLS: {e}"));
    let builder = ClientConfig::builder_with_provider(pem::provider())
        .with_safe_default_protocol_versions()
        .map_err(unusable)?;
    let builder = match &flags.cacert {
        Some(path) => builder.with_root_certificates(roots(path)?),
        None => builder.with_platform_verifier().map_err(unusable)?,
    };
    let config =
        match (&flags.cert, &flags.key) {
            (Some(cert), Some(key)) => {
                let (chain, private) = client_cert(cert, key)?;
                builder
                    .with_client_auth_cert(chain, private)
                    .map_err(|e| fail(2, format!("{e}; check --cert and --key")))?
            }
            (None, None) => builder.with_no_client_auth(),
            // clap's `requires` refuses one without the other; this covers the
            // variables, which it does not check.
            _ => return Err(fail(
                2,
                "--cert (LOCKD_CLIENT_CERT) and --key (LOCKD_CLIENT_KEY) go together; give both",
            )),
        };
    Ok(Some(Arc::new(config)))
}

/// The CA certificates of `path`, the only roots trusted.
fn roots(path: &Path) -> Result<RootCertStore, Failure> {
    let usage = |e: String| fail(2, format!("--cacert (LOCKD_CACERT): {e}"));
    let certs = pem::certificates(path).map_err(|e| usage(format!("{e:#}")))?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| {
            usage(format!(
                "{} holds a certificate that cannot be a root: {e}",
                path.display()
            ))
        })?;
    }
    Ok(roots)
}

/// The client certificate chain in `cert` with its key in `key`, checked to
/// belong together first, so that a mismatch is named here rather than
/// failing every handshake.
fn client_cert(
    cert: &Path,
    key: &Path,
) -> Result<
    (
        Vec<rustls::pki_types::CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    Failure,
> {
    let usage = |e: anyhow::Error| fail(2, format!("{e:#}; check --cert and --key"));
    let certified = pem::certified_key(cert, key).map_err(usage)?;
    let private = pem::private_key(key).map_err(usage)?;
    Ok((certified.cert, private))
}

/// What a TLS failure with `server` means, and what to do about it.
/// `client_cert` says whether this client presented a certificate.
pub fn failure(server: &str, error: &rustls::Error, client_cert: bool) -> Failure {
    use CertificateError as C;
    let message = match error {
        rustls::Error::InvalidCertificate(cert) => match cert {
            C::UnknownIssuer | C::BadSignature | C::UnsupportedSignatureAlgorithmContext { .. } => {
                format!(
                    "the server's certificate is not trusted ({cert}): no CA this client trusts \
                 signed it; pass --cacert FILE (LOCKD_CACERT) with the CA that did"
                )
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                "the server's certificate does not name this server ({cert}); connect by a \
                 name or address the certificate lists"
            ),
            C::Expired | C::ExpiredContext { .. } => {
                format!("the server's certificate has expired ({cert}); the server needs a new one")
            }
            C::NotValidYet | C::NotValidYetContext { .. } => format!(
                "the server's certificate is not valid yet ({cert}); check this host's clock"
            ),
            other => format!(
                "the server's certificate cannot be used ({other}); the server needs a \
                 certificate a CA issued to it for serving TLS"
            ),
        },
        rustls::Error::AlertReceived(alert) if !client_cert && refuses_client(*alert) => format!(
            "the server requires a client certificate (TLS alert {alert:?}); pass --cert FILE \
             --key FILE (LOCKD_CLIENT_CERT, LOCKD_CLIENT_KEY)"
        ),
        rustls::Error::AlertReceived(alert) if refuses_client(*alert) => format!(
            "the server refused this client's certificate (TLS alert {alert:?}); it must be \
             signed by a CA the server trusts (its --tls-client-ca)"
        ),
        rustls::Error::InvalidMessage(_) => format!(
            "the server does not speak TLS ({error}); use an http:// URL if it serves plain HTTP"
        ),
        other => format!("the TLS handshake failed ({other})"),
    };
    fail(
        3,
        format!("cannot talk to the server at {server}: {message}"),
    )
}

/// Alerts a server sends about the client's certificate, or its absence.
fn refuses_client(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied
            | AlertDescription::HandshakeFailure
            | AlertDescription::DecryptError
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_say_what_is_wrong_and_what_to_do() {
        let untrusted = failure(
            "https://h:1",
            &rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            false,
        );
        assert_eq!(untrusted.code, 3);
        assert!(
            untrusted.message.contains("not trusted") && untrusted.message.contains("--cacert"),
            "{}",
            untrusted.message
        );
        let no_cert = failure(
            "https://h:1",
            &rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
            false,
        );
        assert!(
            no_cert.message.contains("--cert FILE --key FILE"),
            "{}",
            no_cert.message
        );
        let refused = failure(
            "https://h:1",
            &rustls::Error::AlertReceived(AlertDescription::UnknownCA),
            true,
        );
        assert!(
            refused
                .message
                .contains("refused this client's certificate"),
            "{}",
            refused.message
        );
    }
}
