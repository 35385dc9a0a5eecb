//! The web page at `/ui/` in a real browser: Debian's chromium driven by
//! chromedriver over WebDriver (both installed by scripts/setup.sh). The
//! page signs in with the server's token, lists the namespaces by itself
//! (and, signed in with a scoped token, only that token's), shows a lock
//! taken over REST
//! within a second with a falling countdown and its waiters, filters by
//! prefix, and force-unlocks with its button once the confirmation is
//! accepted. A screenshot lands in target/ui-screenshot.png.
//!
//! Without chromium or chromedriver the test says so and passes, except
//! under CI (`CI=true`), where it fails.

mod lockd_server;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::lockd_server::{closed_port, request, Server};
use serde_json::{json, Value};

const TOKEN: &str = "ui-secret";
/// A reader over `team-*` (lockd.toml's `[[auth.tokens]]`).
const TEAM_TOKEN: &str = "ui-team-secret";
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The first of `candidates` that exists, or on `PATH`.
fn find_tool(candidates: &[&str]) -> Option<PathBuf> {
    for c in candidates {
        let p = Path::new(c);
        if p.is_absolute() && p.exists() {
            return Some(p.to_path_buf());
        }
        if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths) {
                let full = dir.join(c);
                if full.exists() {
                    return Some(full);
                }
            }
        }
    }
    None
}

/// chromedriver on a free port, with one headless chromium session; both
/// end on drop.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
}

impl Browser {
    fn start(chromium: &Path, chromedriver: &Path) -> Browser {
        let port = closed_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let base = format!("http://127.0.0.1:{port}");
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            agent,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let up = browser
                .agent
                .get(format!("{}/status", browser.base))
                .call()
                .ok()
                .and_then(|r| r.into_body().read_to_string().ok())
                .and_then(|b| serde_json::from_str::<Value>(&b).ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if up {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {
                "binary": chromium.to_string_lossy(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,720"]
            }
        }}});
        let v = browser.call("POST", "/session", Some(caps));
        browser.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        browser
    }

    /// One WebDriver command; answers its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let response = match method {
            "GET" => self.agent.get(&url).call(),
            "DELETE" => self.agent.delete(&url).call(),
            _ => self
                .agent
                .post(&url)
                .send_json(body.unwrap_or_else(|| json!({}))),
        }
        .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        let text = response.into_body().read_to_string().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        v["value"].clone()
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let v = self.call(method, &format!("/session/{}{path}", self.session), body);
        if let Some(err) = v.get("error") {
            panic!("WebDriver {method} {path}: {err} {}", v["message"]);
        }
        v
    }

    fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    fn find(&self, css: &str) -> String {
        let v = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v[ELEMENT].as_str().unwrap().to_string()
    }

    fn click(&self, css: &str) {
        let id = self.find(css);
        self.cmd("POST", &format!("/element/{id}/click"), None);
    }

    fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css);
        self.cmd("POST", &format!("/element/{id}/clear"), None);
        if !text.is_empty() {
            self.cmd(
                "POST",
                &format!("/element/{id}/value"),
                Some(json!({ "text": text })),
            );
        }
    }

    /// Waits up to `within` for `script` to return something truthy.
    fn wait_for(&self, within: Duration, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let v = self.js(script);
            if !(v.is_null() || v == false || v == "" || v == 0) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}; page: {}",
                self.js("return document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn screenshot(&self, to: &Path) {
        let b64 = self.cmd("GET", "/screenshot", None);
        let png = base64_decode(b64.as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(to, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self
                .agent
                .delete(format!("{}/session/{}", self.base, self.session))
                .call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c) << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

fn post(server: &Server, path: &str, body: Value) -> Value {
    let r = request(
        "POST",
        &server.url,
        path,
        Some(&body.to_string()),
        Some(TOKEN),
    );
    assert!(r.code == 200, "{path}: {} {}", r.code, r.body);
    r.json
}

/// The row of a lock as the page shows it: `[owner, token, durability,
/// expires, waiters]`, or null.
fn row_script(ns: &str, name: &str) -> String {
    format!(
        r#"const r = document.querySelector('tr.lock[data-ns="{ns}"][data-name="{name}"]');
           if (!r) return null;
           return ['owner','token','durability','expires','waiters']
             .map(c => r.querySelector('td.' + c).textContent);"#
    )
}

/// The mode cell of a lock's row (`shared (2)`), or null.
fn mode_script(ns: &str, name: &str) -> String {
    format!(
        r#"const r = document.querySelector('tr.lock[data-ns="{ns}"][data-name="{name}"]');
           return r ? r.querySelector('td.mode').textContent : null;"#
    )
}

/// Makes the store at `path` issue tokens from 2^53 + 2 on, as a store
/// written by hand or before tokens followed the clock would: a page that
/// read them as doubles would show an odd one rounded to its even neighbour
/// (db-migrate gets 2^53 + 2, deploy 2^53 + 3).
fn reserve_tokens_above_doubles(path: &Path) {
    use lockd_core::{Journal as _, JournalOp};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (journal, _) = lockd_redb::RedbJournal::open(path).unwrap();
    runtime
        .block_on(
            journal
                .submit(JournalOp::ReserveTokens {
                    up_to: (1 << 53) + 1,
                })
                .wait(),
        )
        .unwrap();
}

#[test]
fn the_page_shows_locks_live_and_force_unlocks() {
    let tools = (
        find_tool(&["chromium", "/usr/bin/chromium"]),
        find_tool(&["chromedriver", "/usr/bin/chromedriver"]),
    );
    let (Some(chromium), Some(chromedriver)) = tools else {
        let message = "chromium and chromedriver are needed (scripts/setup.sh installs \
                       Debian's chromium and chromium-driver)";
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            panic!("{message}; CI=true, so this is a failure");
        }
        eprintln!("SKIPPED: {message}");
        return;
    };

    let dir = tempfile::tempdir().unwrap();
    let team_entry = format!(
        "[[auth.tokens]]\nname = \"team\"\nsha256 = \"{}\"\nnamespaces = [\"team-*\"]\nrole = \"reader\"\n",
        ::lockd_server::auth::to_hex(&::lockd_server::auth::digest(TEAM_TOKEN))
    );
    std::fs::write(dir.path().join("lockd.toml"), team_entry).unwrap();
    reserve_tokens_above_doubles(&dir.path().join("locks.redb"));
    let server = Server::start_in(
        Some(dir.path()),
        &["--store", "redb:locks.redb", "--auth-token", TOKEN],
        &[],
    );
    // Before the page opens: a lock with one caller queued behind it.
    post(
        &server,
        "/v1/locks/lock",
        json!({"name": "db-migrate", "owner": "job-7", "ttl_ms": 120_000}),
    );
    // Locks in namespaces nobody types into the page.
    for ns in ["team-a", "prod"] {
        post(
            &server,
            "/v1/locks/lock",
            json!({"namespace": ns, "name": "nightly", "owner": "cron", "ttl_ms": 120_000}),
        );
    }
    let url = server.url.clone();
    let waiter = std::thread::spawn(move || {
        request(
            "POST",
            &url,
            "/v1/locks/lock",
            Some(r#"{"name":"db-migrate","owner":"job-8","ttl_ms":60000,"wait_ms":60000}"#),
            Some(TOKEN),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while lockd_server::metric_value(
        &request("GET", &server.url, "/metrics", None, Some(TOKEN)).body,
        "lockd_waiters",
    ) != 1
    {
        assert!(Instant::now() < deadline, "the waiter never queued");
        std::thread::sleep(Duration::from_millis(10));
    }

    let browser = Browser::start(&chromium, &chromedriver);
    // `/` leads to the page.
    browser.goto(&format!("{}/", server.url));
    let at = browser.cmd("GET", "/url", None);
    assert_eq!(at, format!("{}/ui/", server.url));
    // The server has a token: the page asks for it once.
    browser.wait_for(
        Duration::from_secs(10),
        "the sign-in form",
        "return !document.getElementById('login').hidden",
    );
    browser.type_into("#token", TOKEN);
    browser.click("#login button");
    browser.wait_for(
        Duration::from_secs(10),
        "the live stream",
        "return document.getElementById('conn').textContent === 'live'",
    );
    assert_eq!(
        browser.js("return sessionStorage.getItem('lockd-token')"),
        TOKEN
    );
    let migrate = browser.wait_for(
        Duration::from_secs(5),
        "db-migrate listed",
        &row_script("default", "db-migrate"),
    );
    assert_eq!(migrate[0], "job-7");
    assert_eq!(migrate[4], "1", "waiters: {migrate}");
    // Every namespace with locks is listed by itself.
    let sections =
        "return [...document.querySelectorAll('div.namespace')].map(n => n.dataset.ns).join(',')";
    browser.wait_for(
        Duration::from_secs(5),
        "every namespace listed",
        &format!(
            "const s = (() => {{ {sections} }})(); return s === 'default,prod,team-a' ? s : null;"
        ),
    );
    assert!(browser.js(&row_script("prod", "nightly")).is_array());

    // A lock taken over REST appears within a second, with its expiry.
    let grant = post(
        &server,
        "/v1/locks/lock",
        json!({"name": "deploy", "owner": "ci-runner-7", "ttl_ms": 30_000, "durability": "ephemeral"}),
    );
    let taken = Instant::now();
    let row = browser.wait_for(
        Duration::from_secs(1),
        "deploy shown",
        &format!(
            "const r = (() => {{ {} }})(); return r && r[3].endsWith(' s') ? r : null;",
            row_script("default", "deploy")
        ),
    );
    eprintln!("deploy shown {:?} after the lock", taken.elapsed());
    let token = grant["fencing_token"].as_u64().unwrap();
    // Odd, above 2^53: no double holds it.
    assert!(token > 1 << 53 && token % 2 == 1, "{grant}");
    assert_eq!(row[0], "ci-runner-7");
    // The page shows the exact token, digit for digit as the REST answer.
    assert_eq!(row[1], token.to_string());
    assert_eq!(row[2], "ephemeral");
    assert_eq!(row[4], "0");
    let seconds = |row: &Value| -> f64 {
        row[3]
            .as_str()
            .unwrap()
            .trim_end_matches(" s")
            .parse()
            .unwrap()
    };
    let first = seconds(&row);
    assert!(first > 25.0 && first <= 30.0, "{row}");
    // The countdown falls.
    std::thread::sleep(Duration::from_millis(1500));
    let later = seconds(&browser.js(&row_script("default", "deploy")));
    assert!(
        later <= first - 1.0 && later > first - 5.0,
        "{first} then {later}"
    );
    // The event is in the list.
    let events = browser.js("return document.getElementById('events').innerText");
    assert!(
        events
            .as_str()
            .unwrap()
            .contains(&format!("default/deploy · ci-runner-7 · token {token}")),
        "{events}"
    );

    // The prefix filter.
    browser.type_into("#prefix", "dep");
    assert!(browser.js(&row_script("default", "deploy")).is_array());
    assert!(browser.js(&row_script("default", "db-migrate")).is_null());
    browser.type_into("#prefix", "");
    assert!(browser.js(&row_script("default", "db-migrate")).is_array());

    // Force-unlock with the button: a confirmation first.
    browser.click(r#"tr.lock[data-name="deploy"] button.force"#);
    let question = browser.cmd("GET", "/alert/text", None);
    assert_eq!(
        question,
        format!("Force-unlock default/deploy, held by ci-runner-7 (token {token})?")
    );
    browser.cmd("POST", "/alert/accept", None);
    browser.wait_for(
        Duration::from_secs(1),
        "deploy gone",
        &format!(
            "return ((() => {{ {} }})()) === null",
            row_script("default", "deploy")
        ),
    );
    let r = request(
        "POST",
        &server.url,
        "/v1/locks/get",
        Some(r#"{"name":"deploy"}"#),
        Some(TOKEN),
    );
    assert_eq!(r.code, 404, "{}", r.body);
    browser.wait_for(
        Duration::from_secs(1),
        "the force_released event listed",
        "return document.getElementById('events').innerText.includes('force_released')",
    );

    // Dismissing the confirmation leaves the lock alone.
    browser.click(r#"tr.lock[data-name="db-migrate"] button.force"#);
    browser.cmd("POST", "/alert/dismiss", None);
    std::thread::sleep(Duration::from_millis(300));
    let r = request(
        "POST",
        &server.url,
        "/v1/locks/get",
        Some(r#"{"name":"db-migrate"}"#),
        Some(TOKEN),
    );
    assert_eq!(r.json["owner"], "job-7", "{}", r.body);
    // Accepted, it passes to the waiter, and the page follows.
    browser.click(r#"tr.lock[data-name="db-migrate"] button.force"#);
    browser.cmd("POST", "/alert/accept", None);
    let row = browser.wait_for(
        Duration::from_secs(2),
        "db-migrate handed to job-8",
        &format!(
            "const r = (() => {{ {} }})(); return r && r[0] === 'job-8' && r[4] === '0' ? r : null;",
            row_script("default", "db-migrate")
        ),
    );
    assert_eq!(row[0], "job-8");
    let granted = waiter.join().unwrap();
    assert_eq!(granted.code, 200, "{}", granted.body);
    assert_eq!(
        browser.js(&mode_script("default", "db-migrate")),
        "exclusive"
    );

    // A shared name and a semaphore: their mode, holders and permits.
    for (name, owner, claim) in [
        ("reports", "r1", json!({"mode": "shared"})),
        ("reports", "r2", json!({"mode": "shared"})),
        ("pool", "p1", json!({"permits": 3})),
        ("pool", "p2", json!({"permits": 3})),
    ] {
        let mut body = json!({"name": name, "owner": owner, "ttl_ms": 60_000});
        body.as_object_mut()
            .unwrap()
            .extend(claim.as_object().unwrap().clone());
        post(&server, "/v1/locks/lock", body);
    }
    let shows = |name: &str, mode: &str| {
        browser.wait_for(
            Duration::from_secs(2),
            &format!("{name} shown as {mode}"),
            &format!(
                "const m = (() => {{ {} }})(); return m === '{mode}' ? m : null;",
                mode_script("default", name)
            ),
        );
    };
    shows("reports", "shared (2)");
    shows("pool", "permit (2/3)");
    // docs/ui.png is this picture.
    let shot = target_dir().join("ui-screenshot.png");
    browser.screenshot(&shot);
    eprintln!("screenshot: {}", shot.display());
    post(
        &server,
        "/v1/locks/unlock",
        json!({"name": "reports", "owner": "r2"}),
    );
    shows("reports", "shared (1)");
    browser.wait_for(
        Duration::from_secs(2),
        "reports shown held by r1",
        &format!(
            "const r = (() => {{ {} }})(); return r && r[0] === 'r1' ? r : null;",
            row_script("default", "reports")
        ),
    );

    // Signed in with a token scoped to team-*, the page shows team-a only.
    browser.js("sessionStorage.clear(); location.reload(); return null;");
    browser.wait_for(
        Duration::from_secs(10),
        "the sign-in form again",
        "return !document.getElementById('login').hidden",
    );
    browser.type_into("#token", TEAM_TOKEN);
    browser.click("#login button");
    let row = browser.wait_for(
        Duration::from_secs(5),
        "team-a listed",
        &row_script("team-a", "nightly"),
    );
    assert_eq!(row[0], "cron");
    assert_eq!(browser.js(sections), "team-a");
}
