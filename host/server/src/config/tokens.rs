//! `[auth]` of lockd.toml: the tokens the REST API accepts, each with its
//! namespaces and role (docs/operating.md#authentication). The file holds only
//! each token's SHA-256, never a token; `lockd token new` prints a token
//! and the block to paste here. A token may have a rate limit
//! (`rate_per_sec`, `burst`: [`crate::rate_limit`]).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::auth::{self, Credential, Credentials, NamespacePattern, Role, Scope};
use crate::rate_limit::RateLimit;

/// `[auth]`
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `[[auth.tokens]]`: every token the server accepts (with the
    /// server's `--auth-token`, if given). None at all: no authentication.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
}

/// One `[[auth.tokens]]` entry.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Unique; logs and refusals name the token by it.
    pub name: String,
    /// The SHA-256 of the token, 64 hex digits.
    pub sha256: String,
    /// Exact names, prefixes ending in `*`, or `"*"` for every namespace.
    pub namespaces: Vec<String>,
    /// `reader`, `locker` or `admin`.
    pub role: String,
    /// Requests a second this token may make on average: a positive
    /// number, fractions allowed. None: no limit. Kept as written and
    /// checked with the rest of the entry, so that a wrong value's message
    /// names the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_sec: Option<toml::Value>,
    /// Requests the token may make at once (a positive whole number; by
    /// default `rate_per_sec` rounded up, at least 1). Only with
    /// `rate_per_sec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<toml::Value>,
}

impl AuthConfig {
    /// The tokens as the server checks them, the `--auth-token` flag's
    /// among them (an admin over `"*"`, named
    /// [`auth-token`](auth::FLAG_TOKEN_NAME)). An error names the entry and
    /// the field that is wrong.
    pub fn credentials(&self, flag_token: Option<&str>) -> anyhow::Result<Credentials> {
        let mut names = HashSet::new();
        let mut tokens = Vec::with_capacity(self.tokens.len() + 1);
        for (i, entry) in self.tokens.iter().enumerate() {
            let at = format!("[[auth.tokens]] entry {} (name {:?})", i + 1, entry.name);
            tokens.push(
                entry
                    .credential()
                    .map_err(|e| anyhow::anyhow!("{at}: {e}"))?,
            );
            if !names.insert(entry.name.as_str()) {
                anyhow::bail!(
                    "{at}: name {:?} is used twice; names must be unique",
                    entry.name
                );
            }
        }
        if let Some(token) = flag_token.filter(|t| !t.is_empty()) {
            if names.contains(auth::FLAG_TOKEN_NAME) {
                anyhow::bail!(
                    "[[auth.tokens]]: name {:?} is the server's --auth-token \
                     (LOCKD_AUTH_TOKEN); rename the entry",
                    auth::FLAG_TOKEN_NAME
                );
            }
            tokens.push(Credential::from_flag(token));
        }
        Ok(Credentials::new(tokens))
    }

    /// Checks every entry, as [`AuthConfig::credentials`] would.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.credentials(None).map(drop)
    }
}

/// A token `lockd token new` made: the token, and the `[[auth.tokens]]`
/// entry that admits it. Its `Debug` shows no token.
pub struct NewToken {
    /// The token: [`TOKEN_BYTES`](auth::TOKEN_BYTES) random bytes as 64 hex
    /// digits. It is shown once and kept nowhere.
    pub token: String,
    /// The entry for lockd.toml, with the token's SHA-256.
    pub entry: TokenConfig,
}

impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewToken")
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

impl NewToken {
    /// A new random token named `name` over `namespaces` with `role`,
    /// checked as lockd.toml's entries are.
    pub fn generate(name: &str, namespaces: Vec<String>, role: &str) -> anyhow::Result<Self> {
        let token = auth::new_token()?;
        let entry = TokenConfig {
            name: name.to_string(),
            sha256: auth::to_hex(&auth::digest(&token)),
            namespaces,
            role: role.to_string(),
            rate_per_sec: None,
            burst: None,
        };
        entry.credential().map_err(anyhow::Error::msg)?;
        Ok(NewToken { token, entry })
    }

    /// The `[[auth.tokens]]` block to paste into lockd.toml.
    pub fn toml_block(&self) -> anyhow::Result<String> {
        let auth = AuthConfig {
            tokens: vec![self.entry.clone()],
        };
        #[derive(Serialize)]
        struct File<'a> {
            auth: &'a AuthConfig,
        }
        Ok(toml::to_string(&File { auth: &auth })?)
    }
}

impl TokenConfig {
    fn credential(&self) -> Result<Credential, String> {
        if self.name.trim().is_empty() {
            return Err("name is empty; give the token a name for logs".to_string());
        }
        let digest = auth::digest_from_hex(&self.sha256).ok_or_else(|| {
            format!(
                "sha256 must be 64 hex digits (the SHA-256 of the token, not the token; \
                 `lockd token new` prints it), not {} characters",
                self.sha256.len()
            )
        })?;
        if self.namespaces.is_empty() {
            return Err(
                "namespaces is empty; list exact names, prefixes ending in *, or \"*\"".to_string(),
            );
        }
        let patterns = self
            .namespaces
            .iter()
            .map(|p| NamespacePattern::parse(p).map_err(|e| format!("namespaces: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let role = Role::parse(&self.role).map_err(|e| format!("role: {e}"))?;
        let credential = Credential::new(self.name.clone(), digest, Scope::new(patterns), role);
        Ok(credential.with_rate_limit(self.rate_limit()?))
    }

    /// `rate_per_sec` and `burst`, checked: `None` without `rate_per_sec`.
    fn rate_limit(&self) -> Result<Option<RateLimit>, String> {
        let per_sec = match &self.rate_per_sec {
            None if self.burst.is_some() => {
                return Err("burst is set without rate_per_sec; give rate_per_sec \
                     (requests a second) too, or remove burst"
                    .to_string())
            }
            None => return Ok(None),
            // `as` is exact up to 2^53, far beyond any rate.
            Some(toml::Value::Integer(n)) => *n as f64,
            Some(toml::Value::Float(x)) => *x,
            Some(other) => {
                return Err(format!(
                    "rate_per_sec must be a positive number of requests a second, \
                     not the {} {other}",
                    other.type_str()
                ))
            }
        };
        let burst = match &self.burst {
            None => None,
            Some(toml::Value::Integer(n)) if *n >= 1 => Some(
                u32::try_from(*n)
                    .map_err(|_| format!("burst must be at most {} requests, not {n}", u32::MAX))?,
            ),
            Some(toml::Value::Integer(n)) => {
                return Err(format!(
                    "burst must be a positive whole number of requests, not {n}"
                ))
            }
            Some(other) => {
                return Err(format!(
                    "burst must be a positive whole number of requests, not the {} {other}",
                    other.type_str()
                ))
            }
        };
        RateLimit::new(per_sec, burst).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LockdConfig;

    const DIGEST: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn entry(name: &str, sha256: &str, namespaces: &str, role: &str) -> String {
        format!(
            "[[auth.tokens]]\nname = {name:?}\nsha256 = {sha256:?}\n\
             namespaces = {namespaces}\nrole = {role:?}\n"
        )
    }

    fn refusal(text: &str) -> String {
        let config: LockdConfig = toml::from_str(text).unwrap();
        config.auth.validate().unwrap_err().to_string()
    }

    #[test]
    fn tokens_parse_into_credentials() {
        let text = entry("ci", DIGEST, r#"["ci", "deploy-*"]"#, "locker")
            + &entry("ops", &DIGEST.to_uppercase(), r#"["*"]"#, "admin");
        let config: LockdConfig = toml::from_str(&text).unwrap();
        let credentials = config.auth.credentials(Some("flag")).unwrap();
        let names: Vec<&str> = credentials.tokens().iter().map(|c| c.name()).collect();
        assert_eq!(names, ["ci", "ops", "auth-token"]);
        assert_eq!(credentials.identify("abc").unwrap().name(), "ops");
        assert_eq!(credentials.identify("flag").unwrap().role(), Role::Admin);
        assert!(LockdConfig::default()
            .auth
            .credentials(None)
            .unwrap()
            .is_open());
        // An empty flag is no token.
        assert!(LockdConfig::default()
            .auth
            .credentials(Some(""))
            .unwrap()
            .is_open());
    }

    #[test]
    fn a_new_token_round_trips_through_its_block() {
        let made = NewToken::generate(
            "ci \"quoted\"",
            vec!["ci".into(), "deploy-*".into()],
            "locker",
        )
        .unwrap();
        let block = made.toml_block().unwrap();
        assert!(block.starts_with("[[auth.tokens]]\n"), "{block}");
        assert!(!block.contains(&made.token), "{block}");
        let config: LockdConfig = toml::from_str(&block).unwrap();
        let credentials = config.auth.credentials(None).unwrap();
        let found = credentials.identify(&made.token).unwrap();
        assert_eq!(found.name(), "ci \"quoted\"");
        assert_eq!(found.role(), Role::Locker);
        assert_eq!(found.scope().to_string(), "ci, deploy-*");
        assert!(!format!("{made:?}").contains(&made.token));
        let e = NewToken::generate("ci", vec!["a*b".into()], "locker").unwrap_err();
        assert!(e.to_string().contains("namespaces"), "{e}");
    }

    #[test]
    fn bad_entries_are_errors_naming_the_field() {
        let e = refusal(&entry("ci", "abc", r#"["ci"]"#, "locker"));
        assert!(
            e.contains("entry 1 (name \"ci\"): sha256 must be 64 hex digits"),
            "{e}"
        );
        let e = refusal(&entry(
            "ci",
            &DIGEST.replace('a', "g"),
            r#"["ci"]"#,
            "locker",
        ));
        assert!(e.contains("sha256"), "{e}");
        let e = refusal(
            &(entry("ci", DIGEST, r#"["ci"]"#, "locker")
                + &entry("ci", DIGEST, r#"["x"]"#, "admin")),
        );
        assert!(
            e.contains("entry 2 (name \"ci\"): name \"ci\" is used twice"),
            "{e}"
        );
        let e = refusal(&entry("ci", DIGEST, r#"["de*ploy"]"#, "locker"));
        assert!(
            e.contains("namespaces: namespace pattern \"de*ploy\""),
            "{e}"
        );
        let e = refusal(&entry("ci", DIGEST, "[]", "locker"));
        assert!(e.contains("namespaces is empty"), "{e}");
        let e = refusal(&entry("ci", DIGEST, r#"["ci"]"#, "owner"));
        assert!(
            e.contains("role: role \"owner\" is not one of reader, locker, admin"),
            "{e}"
        );
        let e = refusal(&entry("", DIGEST, r#"["ci"]"#, "reader"));
        assert!(e.contains("name is empty"), "{e}");
        let typo = toml::from_str::<LockdConfig>("[[auth.tokens]]\nname = \"x\"\ntoken = \"t\"")
            .unwrap_err()
            .to_string();
        assert!(typo.contains("token"), "{typo}");
        let config: LockdConfig =
            toml::from_str(&entry("auth-token", DIGEST, r#"["*"]"#, "admin")).unwrap();
        assert!(config.auth.validate().is_ok());
        let e = config.auth.credentials(Some("t")).unwrap_err().to_string();
        assert!(e.contains("--auth-token"), "{e}");
    }

    fn limited(extra: &str) -> String {
        entry("ok", DIGEST, r#"["*"]"#, "admin")
            + "\n"
            + &entry("ci", DIGEST, r#"["ci"]"#, "locker")
            + extra
    }

    #[test]
    fn rate_limits_parse_with_their_default_burst() {
        let limit_of = |extra: &str| {
            let config: LockdConfig = toml::from_str(&limited(extra)).unwrap();
            let credentials = config.auth.credentials(None).unwrap();
            assert_eq!(credentials.tokens()[0].rate_limit(), None);
            credentials.tokens()[1]
                .rate_limit()
                .map(|l| (l.per_sec(), l.burst()))
        };
        assert_eq!(limit_of(""), None);
        assert_eq!(limit_of("rate_per_sec = 5\n"), Some((5.0, 5)));
        assert_eq!(limit_of("rate_per_sec = 2.5\n"), Some((2.5, 3)));
        assert_eq!(limit_of("rate_per_sec = 0.2\n"), Some((0.2, 1)));
        assert_eq!(
            limit_of("rate_per_sec = 0.5\nburst = 10\n"),
            Some((0.5, 10))
        );
        // `lockd token new` writes no limit.
        let made = NewToken::generate("ci", vec!["ci".into()], "locker").unwrap();
        let block = made.toml_block().unwrap();
        assert!(
            !block.contains("rate_per_sec") && !block.contains("burst"),
            "{block}"
        );
    }

    #[test]
    fn bad_rate_limits_are_errors_naming_the_token_and_the_key() {
        const RATE: &str = "rate_per_sec must be a positive number";
        const BURST: &str = "burst must be a positive whole number";
        let at = "entry 2 (name \"ci\"): ";
        for (extra, said) in [
            ("rate_per_sec = 0\n", RATE),
            ("rate_per_sec = 0.0\n", RATE),
            ("rate_per_sec = -1\n", RATE),
            ("rate_per_sec = -0.5\n", RATE),
            ("rate_per_sec = nan\n", RATE),
            ("rate_per_sec = inf\n", RATE),
            ("rate_per_sec = true\n", RATE),
            (
                "rate_per_sec = \"fast\"\n",
                "rate_per_sec must be a positive number of requests a second, \
                 not the string \"fast\"",
            ),
            ("rate_per_sec = 5\nburst = 0\n", BURST),
            ("rate_per_sec = 5\nburst = -3\n", BURST),
            ("rate_per_sec = 5\nburst = 2.5\n", BURST),
            ("rate_per_sec = 5\nburst = \"9\"\n", BURST),
            (
                "rate_per_sec = 5\nburst = 4294967296\n",
                "burst must be at most",
            ),
            ("burst = 5\n", "burst is set without rate_per_sec"),
        ] {
            let e = refusal(&limited(extra));
            assert!(e.contains(&format!("{at}{said}")), "{extra}: {e}");
            assert!(e.starts_with("[[auth.tokens]] "), "{extra}: {e}");
        }
        // An unknown key is refused as before.
        let typo = toml::from_str::<LockdConfig>(&limited("rate = 5\n"))
            .unwrap_err()
            .to_string();
        assert!(typo.contains("unknown field `rate`"), "{typo}");
    }
}
