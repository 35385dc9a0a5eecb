//! The listener's TLS: rustls with the ring provider, HTTP/2 or HTTP/1.1 by
//! ALPN, optional client certificates (mutual TLS), and files read again on
//! demand (SIGHUP in the binary) without dropping a connection.
//!
//! What a connection costs before it is TLS: a handshake that does not
//! finish within [`HANDSHAKE_TIMEOUT`] is dropped, whether the client stalls,
//! trickles bytes or sends something that is not TLS; each runs in its
//! connection's own task, so no client delays another. A plain-HTTP request
//! is answered `400` with a hint to use `https://` before it is closed.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::SingleCertAndKey;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;
use crate::pem;

/// How long a client has to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The answer to a plain-HTTP request on the TLS port.
const PLAIN_HTTP_ANSWER: &str = concat!(
    "HTTP/1.1 400 Bad Request\r\n",
    "Content-Type: application/json\r\n",
    "Connection: close\r\n",
    "Content-Length: 93\r\n",
    "\r\n",
    r#"{"status":"invalid_argument","message":"this server speaks HTTPS only; use an https:// URL"}"#,
    "\n",
);

/// The files of a TLS listener, checked to be complete.
#[derive(Clone, Debug)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// The files `config` names, if it asks for TLS at all.
    fn from_config(config: &TlsConfig) -> anyhow::Result<Option<TlsFiles>> {
        match (&config.cert, &config.key) {
            (Some(cert), Some(key)) => Ok(Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: config.client_ca.clone(),
            })),
            (Some(_), None) => anyhow::bail!(
                "--tls-cert ([tls] cert) needs --tls-key ([tls] key), the certificate's private key"
            ),
            (None, Some(_)) => {
                anyhow::bail!("--tls-key ([tls] key) needs --tls-cert ([tls] cert)")
            }
            (None, None) if config.client_ca.is_some() => anyhow::bail!(
                "--tls-client-ca ([tls] client_ca) needs --tls-cert and --tls-key ([tls] cert \
                 and key): client certificates are checked only over TLS"
            ),
            (None, None) => Ok(None),
        }
    }
}

/// The TLS side of a listener. New connections take the current
/// `ServerConfig`; [`Tls::reload`] replaces it whole (certificate, key and
/// client CA together), and connections already open keep the one they
/// started with.
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// A connection past its handshake.
#[derive(Debug)]
pub struct Handshaken {
    /// The TLS stream.
    pub stream: TlsStream<TcpStream>,
    /// Whether ALPN chose HTTP/2 (otherwise the connection speaks HTTP/1.1).
    pub http2: bool,
}

impl Tls {
    /// The TLS listener `config` describes, or `None` if it names no
    /// certificate. Every file is read and checked now: a file that does not
    /// parse, a key that does not match its certificate or a CA file without
    /// a usable CA is an error naming the file.
    pub fn load(config: &TlsConfig) -> anyhow::Result<Option<Arc<Tls>>> {
        let Some(files) = TlsFiles::from_config(config)? else {
            return Ok(None);
        };
        let server_config = server_config(&files)?;
        Ok(Some(Arc::new(Tls {
            files,
            current: RwLock::new(Arc::new(server_config)),
        })))
    }

    /// Reads the files again; connections accepted from now on get the new
    /// certificate. If any file is refused, the certificate in use stays and
    /// the error says which file and why.
    pub fn try_reload(&self) -> anyhow::Result<()> {
        let fresh = Arc::new(server_config(&self.files)?);
        // The new config has a session cache of its own: a session resumed
        // from the old one would skip checking the client against a CA that
        // may just have been replaced.
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    /// [`Tls::try_reload`], with its outcome logged (SIGHUP calls this).
    pub fn reload(&self) {
        match self.try_reload() {
            Ok(()) => tracing::info!(
                cert = %self.files.cert.display(),
                key = %self.files.key.display(),
                client_ca = %self
                    .files
                    .client_ca
                    .as_deref()
                    .map_or("none".to_string(), |p| p.display().to_string()),
                "TLS files reloaded; new connections use them"
            ),
            Err(e) => tracing::error!(
                error = format!("{e:#}"),
                "TLS reload refused; the certificate in use stays"
            ),
        }
    }

    fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Completes the TLS handshake of `stream` within
    /// [`HANDSHAKE_TIMEOUT`]. A plain-HTTP request gets its `400` hint;
    /// anything else that is not TLS is closed.
    pub(crate) async fn handshake(&self, stream: TcpStream) -> io::Result<Handshaken> {
        let acceptor = TlsAcceptor::from(self.current());
        let handshake = async {
            let mut first = [0u8; 1];
            if stream.peek(&mut first).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before a TLS handshake",
                ));
            }
            if first[0] != TLS_HANDSHAKE_RECORD {
                let plain_http = first[0].is_ascii_uppercase();
                let answer = if plain_http {
                    PLAIN_HTTP_ANSWER.as_bytes()
                } else {
                    b""
                };
                close_after(stream, answer).await;
                let what = if plain_http {
                    "a plain-HTTP request on the TLS port"
                } else {
                    "not a TLS handshake"
                };
                return Err(io::Error::new(io::ErrorKind::InvalidData, what));
            }
            match acceptor.accept(stream).into_fallible().await {
                Ok(stream) => Ok(stream),
                // rustls has written its alert (say, a client certificate
                // refused); `close_after` lets the client read it.
                Err((error, stream)) => {
                    close_after(stream, b"").await;
                    Err(error)
                }
            }
        };
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}"),
                )
            })??;
        let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok(Handshaken { stream, http2 })
    }
}

/// How long a refused connection is drained after its last answer.
const LINGER: Duration = Duration::from_secs(1);

/// Sends `last` (an alert already queued, or the plain-HTTP hint), closes
/// the sending side, and reads what the client still sends for up to
/// [`LINGER`]. Closed with unread data, the socket would reset, and the
/// client could lose the answer before reading it: a TLS 1.3 client sends
/// its request before it learns that its certificate was refused.
async fn close_after(mut stream: TcpStream, last: &[u8]) {
    let _ = stream.write_all(last).await;
    let _ = stream.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left = 1usize << 20;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// The rustls configuration `files` describe: their certificate and key,
/// client certificates verified against `client_ca` if given, and ALPN
/// offering HTTP/2 before HTTP/1.1.
fn server_config(files: &TlsFiles) -> anyhow::Result<ServerConfig> {
    let certified = pem::certified_key(&files.cert, &files.key)?;
    let provider = pem::provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("the TLS provider supports no protocol version")?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in pem::certificates(ca)? {
                roots.add(cert).map_err(|e| {
                    anyhow!(
                        "{} holds a certificate that cannot be a CA: {e}",
                        ca.display()
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| anyhow!("the client CA file {} cannot be used: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_answer_has_the_right_length() {
        let (_, body) = PLAIN_HTTP_ANSWER.split_once("\r\n\r\n").unwrap();
        assert!(PLAIN_HTTP_ANSWER.contains(&format!("Content-Length: {}\r\n", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["status"], "invalid_argument");
    }

    #[test]
    fn a_refused_reload_keeps_the_config_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let pki = lockd_test_support::certs::TestPki::new(dir.path());
        let server = pki.server("server");
        let config = TlsConfig {
            cert: Some(server.cert.clone()),
            key: Some(server.key.clone()),
            client_ca: Some(pki.ca().to_path_buf()),
        };
        let tls = Tls::load(&config).unwrap().unwrap();
        let before = tls.current();
        tls.try_reload().unwrap();
        assert!(
            !Arc::ptr_eq(&before, &tls.current()),
            "a reload installs a new config"
        );

        let in_use = tls.current();
        std::fs::write(pki.ca(), "not a CA").unwrap();
        let refused = format!("{:#}", tls.try_reload().unwrap_err());
        assert!(
            refused.contains("ca.pem") && refused.contains("no certificate"),
            "{refused}"
        );
        assert!(Arc::ptr_eq(&in_use, &tls.current()));
        std::fs::write(&server.key, "").unwrap();
        let refused = format!("{:#}", tls.try_reload().unwrap_err());
        assert!(refused.contains("server.key"), "{refused}");
        assert!(Arc::ptr_eq(&in_use, &tls.current()));
    }

    #[test]
    fn incomplete_file_sets_are_refused_by_name() {
        let path = |p: &str| Some(PathBuf::from(p));
        let refusal = |config: TlsConfig| TlsFiles::from_config(&config).unwrap_err().to_string();
        assert!(refusal(TlsConfig {
            cert: path("c.pem"),
            ..TlsConfig::default()
        })
        .contains("needs --tls-key"));
        assert!(refusal(TlsConfig {
            key: path("c.key"),
            ..TlsConfig::default()
        })
        .contains("needs --tls-cert"));
        assert!(refusal(TlsConfig {
            client_ca: path("ca.pem"),
            ..TlsConfig::default()
        })
        .contains("--tls-client-ca"));
        assert!(TlsFiles::from_config(&TlsConfig::default())
            .unwrap()
            .is_none());
    }
}
