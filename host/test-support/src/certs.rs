//! A throwaway public-key infrastructure for TLS tests: a CA, and server and
//! client certificates it signs, written as PEM files into a directory the
//! test owns. Nothing here is fit for production: keys are ECDSA P-256 made
//! on the spot and certificates are valid for a day around now.
//!
//! ```text
//! let dir = tempfile::tempdir()?;
//! let pki = TestPki::new(dir.path());              // ca.pem, ca.key
//! let server = pki.server("server");               // server.pem, server.key: 127.0.0.1, localhost
//! let client = pki.client("client");               // client.pem, client.key: clientAuth only
//! let stranger = TestPki::new(&dir.path().join("other")); // a CA nobody trusts
//! ```

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate and its private key, as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// A CA in a directory, which signs server and client certificates into the
/// same directory.
pub struct TestPki {
    dir: PathBuf,
    ca: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki").field("ca", &self.ca).finish()
    }
}

impl TestPki {
    /// Makes a new CA in `dir` (created if missing): `ca.pem` and `ca.key`.
    pub fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("creating the PKI directory");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            DnType::CommonName,
            format!("lockd test CA {}", dir.display()),
        );
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        valid_around_now(&mut params);
        let key = KeyPair::generate().expect("generating the CA key");
        let cert = params.self_signed(&key).expect("self-signing the CA");
        let ca = dir.join("ca.pem");
        write(&ca, &cert.pem());
        write(&dir.join("ca.key"), &key.serialize_pem());
        Self {
            dir: dir.to_path_buf(),
            ca,
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate (PEM): what clients or servers trust.
    pub fn ca(&self) -> &Path {
        &self.ca
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A server certificate for `127.0.0.1`, `::1` and `localhost`, also
    /// usable as a client certificate (etcd members present theirs to each
    /// other): `NAME.pem`, `NAME.key`.
    pub fn server(&self, name: &str) -> CertFiles {
        self.issue(
            name,
            &["127.0.0.1", "::1", "localhost"],
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    /// A server certificate for exactly `hosts` (IP addresses or DNS names),
    /// for tests of a name that does not match.
    pub fn server_for(&self, name: &str, hosts: &[&str]) -> CertFiles {
        self.issue(name, hosts, &[ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// A client certificate whose common name is `name`: `NAME.pem`,
    /// `NAME.key`.
    pub fn client(&self, name: &str) -> CertFiles {
        self.issue(name, &[], &[ExtendedKeyUsagePurpose::ClientAuth])
    }

    fn issue(&self, name: &str, hosts: &[&str], usages: &[ExtendedKeyUsagePurpose]) -> CertFiles {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("leaf parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.subject_alt_names = hosts
            .iter()
            .map(|host| match host.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*host).try_into().expect("a DNS name")),
            })
            .collect();
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages.to_vec();
        params.use_authority_key_identifier_extension = true;
        valid_around_now(&mut params);
        let key = KeyPair::generate().expect("generating a key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("signing a certificate");
        let files = CertFiles {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        };
        write(&files.cert, &cert.pem());
        write(&files.key, &key.serialize_pem());
        files
    }
}

/// From a day ago to a day ahead: clocks of the test and of the servers it
/// starts agree closely enough.
fn valid_around_now(params: &mut CertificateParams) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64;
    let day = 86_400;
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + time_offset(now - day);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + time_offset(now + day);
}

fn time_offset(secs: i64) -> std::time::Duration {
    std::time::Duration::from_secs(secs as u64)
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_and_certificates_it_signs() {
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(dir.path());
        let server = pki.server("server");
        let client = pki.client("client");
        for path in [pki.ca(), &server.cert, &client.cert] {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(text.starts_with("-----BEGIN CERTIFICATE-----"), "{text}");
        }
        for path in [&server.key, &client.key] {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(text.starts_with("-----BEGIN PRIVATE KEY-----"), "{text}");
        }
    }
}
