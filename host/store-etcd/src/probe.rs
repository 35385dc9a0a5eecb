//! One `GET /health` on a member's client port, over TLS for `https://`
//! endpoints, and what its failure means.
//!
//! The endpoint rotation (`endpoints.rs`) probes members this way, and
//! [`crate::EtcdBackend::connect`] probes every endpoint before its first
//! request: gRPC reports a refused certificate as a bare transport error,
//! or keeps the request waiting until its deadline, while a handshake made
//! here names the cause (an untrusted server certificate, a refused client
//! certificate, a member that does not speak TLS).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{AlertDescription, CertificateError, Error as TlsError};
use tokio_rustls::TlsConnector;

use crate::options::authority;

/// The probes' TLS: the connector, and whether it presents a client
/// certificate (to tell "none given" from "refused").
pub(crate) struct ProbeTls {
    pub(crate) connector: TlsConnector,
    pub(crate) presents_cert: bool,
}

/// What a member answered to `GET /health`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// `{"health":"true"}`: part of a quorum with a leader.
    Healthy,
    /// Answered over HTTP, but not healthy (no leader, say).
    Unhealthy,
}

/// Why a probe got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ProbeError {
    /// Nothing answered, or not in time: the member may be down, or cut off.
    Unreachable(String),
    /// The member answered, but this configuration cannot talk to it (TLS
    /// refused one way or the other). Another try will not help.
    Refused(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Unreachable(why) | ProbeError::Refused(why) => f.write_str(why),
        }
    }
}

/// `GET /health` on `endpoint` (checked by the options), through `tls`
/// when it is an `https://` endpoint, within `limit`.
pub(crate) async fn health(
    endpoint: &str,
    tls: Option<&Arc<ProbeTls>>,
    limit: Duration,
) -> Result<Health, ProbeError> {
    let authority = authority(endpoint).to_string();
    let exchange = async {
        let tcp = TcpStream::connect(&authority)
            .await
            .map_err(|e| ProbeError::Unreachable(connect_failure(&e)))?;
        let https = endpoint.starts_with("https://");
        match (https, tls) {
            (true, Some(tls)) => {
                let host = host_of(&authority);
                let name = ServerName::try_from(host.to_string()).map_err(|_| {
                    ProbeError::Refused(format!("{host:?} is not a valid host name for TLS"))
                })?;
                let stream = tls
                    .connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| handshake_failure(&e, host, tls.presents_cert))?;
                get_health(stream, &authority)
                    .await
                    .map_err(|e| after_handshake_failure(&e, tls.presents_cert))
            }
            (true, None) => Err(ProbeError::Refused(
                "an https endpoint, but no TLS settings were given".into(),
            )),
            (false, _) => get_health(tcp, &authority)
                .await
                .map_err(|e| ProbeError::Unreachable(format!("the /health request failed: {e}"))),
        }
        .and_then(|reply| read_health(&reply))
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(result) => result,
        Err(_) => Err(ProbeError::Unreachable(format!(
            "no answer within {limit:?}"
        ))),
    }
}

/// The host part of `HOST:PORT`, without an IPv6 literal's brackets.
fn host_of(authority: &str) -> &str {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Sends `GET /health` and reads the reply (at most 4 KiB of it: it is a
/// few hundred bytes).
async fn get_health<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    authority: &str,
) -> std::io::Result<String> {
    let request = format!("GET /health HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 1024];
    // Stop at the end of the answer its `Content-Length` gives rather than
    // wait for the member to close: a proxy or relay in between may keep the
    // connection open after etcd closed its side.
    while reply.len() < 4096 && !is_complete(&reply) {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Whether `reply` holds a whole HTTP answer with a `Content-Length` body.
fn is_complete(reply: &[u8]) -> bool {
    let Some(head_end) = reply.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&reply[..head_end]);
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    length.is_some_and(|length| reply.len() >= head_end + 4 + length)
}

fn read_health(reply: &str) -> Result<Health, ProbeError> {
    if reply.contains("Client sent an HTTP request to an HTTPS server") {
        return Err(ProbeError::Refused(
            "the member speaks TLS: use an https:// endpoint (and [etcd] ca_file)".into(),
        ));
    }
    if reply.is_empty() {
        // What etcd's TLS listener does to a plain-HTTP request.
        return Err(ProbeError::Unreachable(
            "the member closed the connection without an HTTP answer (if it serves TLS, \
             use an https:// endpoint and [etcd] ca_file)"
                .into(),
        ));
    }
    if !reply.starts_with("HTTP/1.") {
        return Err(ProbeError::Unreachable(
            "the member did not answer /health over HTTP (is this etcd's client port?)".into(),
        ));
    }
    if reply.starts_with("HTTP/1.1 200") && reply.contains("\"health\":\"true\"") {
        Ok(Health::Healthy)
    } else {
        Ok(Health::Unhealthy)
    }
}

fn connect_failure(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => format!("cannot connect: {e}"),
    }
}

/// The rustls error inside an I/O error from the handshake or the stream.
fn tls_error(e: &std::io::Error) -> Option<&TlsError> {
    e.get_ref()?.downcast_ref::<TlsError>()
}

/// What a failed handshake means, for the member at `host`.
fn handshake_failure(e: &std::io::Error, host: &str, presents_cert: bool) -> ProbeError {
    let Some(tls) = tls_error(e) else {
        return ProbeError::Unreachable(format!("the TLS handshake failed: {e}"));
    };
    ProbeError::Refused(match tls {
        TlsError::InvalidCertificate(CertificateError::UnknownIssuer)
        | TlsError::InvalidCertificate(CertificateError::BadSignature) => {
            "certificate not trusted (is [etcd] ca_file the CA that signed the server's \
             certificate?)"
                .into()
        }
        TlsError::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "the server's certificate is not valid for {host} (its subjectAltName must name \
             the host or IP address of the endpoint)"
        ),
        TlsError::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the server's certificate has expired".into(),
        TlsError::InvalidCertificate(other) => {
            format!("the server's certificate was refused: {other:?}")
        }
        TlsError::InvalidMessage(_) | TlsError::InappropriateMessage { .. } => {
            "the member does not speak TLS (is it an http:// endpoint?)".into()
        }
        TlsError::AlertReceived(alert) => client_cert_refused(*alert, presents_cert),
        other => format!("the TLS handshake failed: {other}"),
    })
}

/// What a failure right after the handshake means: with TLS 1.3 the server
/// checks the client's certificate after the client considers the
/// handshake done, and says so with an alert on the first read.
fn after_handshake_failure(e: &std::io::Error, presents_cert: bool) -> ProbeError {
    match tls_error(e) {
        Some(TlsError::AlertReceived(alert)) => {
            ProbeError::Refused(client_cert_refused(*alert, presents_cert))
        }
        Some(other) => ProbeError::Refused(format!("TLS failed: {other}")),
        None => ProbeError::Unreachable(format!("the /health request failed: {e}")),
    }
}

fn client_cert_refused(alert: AlertDescription, presents_cert: bool) -> String {
    let about_certs = matches!(
        alert,
        AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::AccessDenied
    );
    if about_certs && !presents_cert {
        return format!(
            "the server requires a client certificate ({alert:?}): set [etcd] cert_file \
             and key_file"
        );
    }
    match alert {
        AlertDescription::BadCertificate
        | AlertDescription::UnknownCA
        | AlertDescription::UnsupportedCertificate
        | AlertDescription::CertificateUnknown
        | AlertDescription::CertificateRevoked
        | AlertDescription::CertificateExpired
        | AlertDescription::AccessDenied => format!(
            "the server refused the client certificate ({alert:?}): is [etcd] cert_file \
             signed by the CA the member trusts (its --trusted-ca-file)?"
        ),
        other => format!("the server ended the TLS handshake ({other:?})"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_answer_is_complete_at_its_content_length() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        let mut reply = head.to_vec();
        assert!(!super::is_complete(&reply));
        reply.extend_from_slice(b"abcd");
        assert!(!super::is_complete(&reply));
        reply.push(b'e');
        assert!(super::is_complete(&reply));
        assert!(!super::is_complete(b"HTTP/1.1 200 OK\r\n\r\nbody"));
    }

    use super::*;

    #[test]
    fn hosts_lose_port_and_brackets() {
        assert_eq!(host_of("127.0.0.1:2379"), "127.0.0.1");
        assert_eq!(host_of("[::1]:2379"), "::1");
        assert_eq!(host_of("etcd-1:2379"), "etcd-1");
    }

    #[test]
    fn replies_are_read() {
        let ok = "HTTP/1.1 200 OK\r\n\r\n{\"health\":\"true\",\"reason\":\"\"}";
        assert_eq!(read_health(ok), Ok(Health::Healthy));
        let no_leader = "HTTP/1.1 503 Service Unavailable\r\n\r\n{\"health\":\"false\"}";
        assert_eq!(read_health(no_leader), Ok(Health::Unhealthy));
        let plain_to_tls =
            "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
        assert!(
            matches!(read_health(plain_to_tls), Err(ProbeError::Refused(m)) if m.contains("https://"))
        );
        assert!(
            matches!(read_health(""), Err(ProbeError::Unreachable(m)) if m.contains("https://"))
        );
        assert!(matches!(
            read_health("SSH-2.0"),
            Err(ProbeError::Unreachable(_))
        ));
    }
}
