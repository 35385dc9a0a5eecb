//! How lockd gets into etcd: TLS (a CA, a client certificate) and an etcd
//! user, and what etcd's refusals mean in those terms.
//!
//! The client's TLS runs on tonic's rustls with ring; the endpoint probes
//! (`probe.rs`) build their own rustls configuration from the same files,
//! so both trust and present the same certificates.
//!
//! etcd's simple auth tokens expire (`--auth-token-ttl`, 300 s by default,
//! counted from the token's last use), and a restarted member forgets them
//! all. The client authenticates again and resends any request refused for
//! an invalid token, watches and keep-alives included
//! (`ConnectOptions::with_auto_token_refresh`).

use std::path::Path;
use std::sync::Arc;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use lockd_core::LockError;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::options::EtcdOptions;
use crate::probe::ProbeTls;

/// What a backend knows about its way into etcd, for its probes and its
/// messages.
#[derive(Clone)]
pub(crate) struct Access {
    /// The probes' TLS (`https://` endpoints only).
    tls: Option<Arc<ProbeTls>>,
    /// Who etcd takes lockd for, in messages: the user, or the client
    /// certificate's common name (etcd's user when no token is sent and
    /// members run with `--client-cert-auth`).
    who: String,
    /// Where lockd's keys live, for permission messages.
    prefix: String,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("tls", &self.tls.is_some())
            .field("who", &self.who)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Access {
    /// Reads the TLS files of `options` (checked), and the client's
    /// connect options with TLS and the user in them.
    pub(crate) fn load(
        options: &EtcdOptions,
        mut connect: ConnectOptions,
    ) -> Result<(Access, ConnectOptions), LockError> {
        let mut tls = None;
        if let (true, Some(ca_file)) = (options.uses_tls(), &options.ca_file) {
            let ca_pem = read_file("ca_file", ca_file)?;
            let mut roots = RootCertStore::empty();
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(&ca_pem) {
                let cert = cert.map_err(|e| bad_file("ca_file", ca_file, &e))?;
                roots
                    .add(cert)
                    .map_err(|e| bad_file("ca_file", ca_file, &e))?;
                added += 1;
            }
            if added == 0 {
                return Err(bad_file("ca_file", ca_file, &"no PEM certificate in it"));
            }
            let builder = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| LockError::InvalidArgument(format!("etcd TLS: {e}")))?
                .with_root_certificates(roots);
            let mut tonic_tls = TlsOptions::new()
                .ca_certificate(Certificate::from_pem(&ca_pem))
                .timeout(options.dial_timeout);
            let mut config = match &options.client_cert {
                Some(cc) => {
                    let cert_pem = read_file("cert_file", &cc.cert_file)?;
                    let key_pem = read_file("key_file", &cc.key_file)?;
                    let chain = CertificateDer::pem_slice_iter(&cert_pem)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| bad_file("cert_file", &cc.cert_file, &e))?;
                    if chain.is_empty() {
                        return Err(bad_file(
                            "cert_file",
                            &cc.cert_file,
                            &"no PEM certificate in it",
                        ));
                    }
                    let key = PrivateKeyDer::from_pem_slice(&key_pem)
                        .map_err(|e| bad_file("key_file", &cc.key_file, &e))?;
                    tonic_tls = tonic_tls.identity(Identity::from_pem(&cert_pem, &key_pem));
                    builder.with_client_auth_cert(chain, key).map_err(|e| {
                        LockError::InvalidArgument(format!(
                            "etcd cert_file {} and key_file {} do not go together: {e}",
                            cc.cert_file.display(),
                            cc.key_file.display()
                        ))
                    })?
                }
                None => builder.with_no_client_auth(),
            };
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            tls = Some(Arc::new(ProbeTls {
                connector: TlsConnector::from(Arc::new(config)),
                presents_cert: options.client_cert.is_some(),
            }));
            connect = connect.with_tls(tonic_tls);
        }
        if let Some(user) = &options.user {
            connect = connect
                .with_user(user.name.clone(), user.password.clone())
                .with_auto_token_refresh(true);
        }
        let who = match (&options.user, &options.client_cert) {
            (Some(user), _) => format!("user {}", user.name),
            (None, Some(cc)) => format!(
                "the user named by client certificate {} (its common name)",
                cc.cert_file.display()
            ),
            (None, None) => "lockd (no [etcd] user)".into(),
        };
        let access = Access {
            tls,
            who,
            prefix: options.prefix.clone(),
        };
        Ok((access, connect))
    }

    /// The probes' TLS connector, for `https://` endpoints.
    pub(crate) fn tls(&self) -> Option<&Arc<ProbeTls>> {
        self.tls.as_ref()
    }

    /// `e` said in terms of this configuration: a refused password, a
    /// missing user or permission, said so; anything else as etcd-client
    /// puts it. Never holds the password.
    pub(crate) fn describe(&self, e: &etcd_client::Error) -> String {
        self.refusal(e).unwrap_or_else(|| e.to_string())
    }

    /// What `e` says if etcd refused lockd's credentials or permissions
    /// (as opposed to failing): another try will not help until an
    /// operator changes etcd or lockd's settings.
    pub(crate) fn refusal(&self, e: &etcd_client::Error) -> Option<String> {
        let etcd_client::Error::GRpcStatus(status) = e else {
            return None;
        };
        let message = status.message();
        let who = &self.who;
        Some(if message.contains("authentication failed") {
            format!(
                "authentication failed for {who}: etcd says {message:?} \
                 (check [etcd] user and password_file, or LOCKD_ETCD_PASSWORD)"
            )
        } else if message.contains("user name is empty") {
            "etcd has authentication enabled: set [etcd] user and password_file \
             (or LOCKD_ETCD_PASSWORD)"
                .into()
        } else if message.contains("authentication is not enabled") {
            format!(
                "{who} is set, but etcd has authentication disabled: \
                 remove [etcd] user, or enable auth in etcd"
            )
        } else if i32::from(status.code()) == PERMISSION_DENIED
            || message.contains("permission denied")
        {
            format!(
                "{who} has no permission on prefix {} (grant its role readwrite on the \
                 prefix: etcdctl role grant-permission ROLE --prefix=true readwrite {}/)",
                self.prefix,
                self.prefix.trim_end_matches('/')
            )
        } else if message.contains("invalid auth token") {
            format!("etcd refused the auth token of {who} and a new one: {message}")
        } else {
            return None;
        })
    }
}

/// gRPC's `PERMISSION_DENIED` (tonic is not a direct dependency).
const PERMISSION_DENIED: i32 = 7;

fn read_file(field: &str, path: &Path) -> Result<Vec<u8>, LockError> {
    std::fs::read(path).map_err(|e| {
        LockError::InvalidArgument(format!(
            "etcd {field} {}: cannot read it: {e}",
            path.display()
        ))
    })
}

fn bad_file(field: &str, path: &Path, e: &dyn std::fmt::Display) -> LockError {
    LockError::InvalidArgument(format!(
        "etcd {field} {}: not usable PEM: {e}",
        path.display()
    ))
}
