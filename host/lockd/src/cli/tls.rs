//! TLS for the CLI's client: what an `https://` server is checked against
//! (the system's roots, or `--cacert`), the client certificate it is shown
//! (`--cert`, `--key`), and what a failed handshake means for the user.
//!
//! A certificate that is not trusted, names another host or has expired is
//! a failure that says so (exit 3); the client never retries over plain
//! HTTP.

use lockd_server::pem;
use rustls::{AlertDescription, CertificateError};
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

use super::failure::{fail, Failure};
use super::flags::ClientTls;

/// The ureq TLS settings `flags` ask for. A file that cannot be used is a
/// usage error (exit 2) naming it.
pub fn config(flags: &ClientTls) -> Result<TlsConfig, Failure> {
    let roots = match &flags.cacert {
        Some(path) => {
            let certs = pem::certificates(path)
                .map_err(|e| fail(2, format!("--cacert (LOCKD_CACERT): {e:#}")))?;
            let certs: Vec<Certificate<'static>> = certs
                .iter()
                .map(|c| Certificate::from_der(c.as_ref()).to_owned())
                .collect();
            RootCerts::new_with_certs(&certs)
        }
        None => RootCerts::PlatformVerifier,
    };
    let client_cert =
        match (&flags.cert, &flags.key) {
            (Some(cert), Some(key)) => Some(client_cert(cert, key)?),
            (None, None) => None,
            // clap's `requires` refuses one without the other; this covers the
            // variables, which it does not check.
            _ => return Err(fail(
                2,
                "--cert (LOCKD_CLIENT_CERT) and --key (LOCKD_CLIENT_KEY) go together; give both",
            )),
        };
    Ok(TlsConfig::builder()
        .root_certs(roots)
        .client_cert(client_cert)
        .build())
}

/// The client certificate in `cert` with its key in `key`, checked to belong
/// together first (ureq would panic on a pair that does not).
fn client_cert(cert: &std::path::Path, key: &std::path::Path) -> Result<ClientCert, Failure> {
    let usage = |e: anyhow::Error| fail(2, format!("{e:#}; check --cert and --key"));
    let certified = pem::certified_key(cert, key).map_err(usage)?;
    let chain: Vec<Certificate<'static>> = certified
        .cert
        .iter()
        .map(|c| Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    // Read again in ureq's form; `certified_key` has checked it parses.
    let private = std::fs::read(key)
        .map_err(|e| {
            fail(
                2,
                format!("reading the private key file {}: {e}", key.display()),
            )
        })
        .and_then(|pem| {
            PrivateKey::from_pem(&pem).map_err(|_| {
                fail(
                    2,
                    format!("{} holds no usable private key; check --key", key.display()),
                )
            })
        })?;
    Ok(ClientCert::new_with_certs(&chain, private))
}

/// The TLS error inside `error`, if the request failed in TLS.
pub fn rustls_error(error: &ureq::Error) -> Option<&rustls::Error> {
    match error {
        ureq::Error::Rustls(e) => Some(e),
        ureq::Error::Io(e) => e.get_ref()?.downcast_ref::<rustls::Error>(),
        _ => None,
    }
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
