//! The failover's decision table, and calls through a scripted [`Io`] that
//! records which hosts were tried.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use super::*;
use crate::{locks, DurabilityWord, HeldLease, LeaseOptions, LockClaim, LockOptions};

#[test]
fn decision_table() {
    use Attempt::*;
    use Retry::{Never, Safe};
    let table = [
        // (attempt, retry, last host, step)
        (Replied, Safe, false, Step::Answer),
        (Replied, Never, true, Step::Answer),
        (NotApplied, Never, false, Step::Next),
        (NotApplied, Safe, false, Step::Next),
        (NotApplied, Never, true, Step::Answer),
        (StoreUnavailable, Safe, false, Step::Next),
        (StoreUnavailable, Safe, true, Step::Answer),
        (StoreUnavailable, Never, false, Step::Answer),
        (NotSent, Never, false, Step::Next),
        (NotSent, Safe, true, Step::Next),
        (Unknown, Safe, false, Step::Next),
        (Unknown, Safe, true, Step::Next),
        (Unknown, Never, false, Step::Stop),
        (Local, Safe, false, Step::Stop),
    ];
    for (attempt, retry, last, expected) in table {
        assert_eq!(
            step(attempt, retry, last),
            expected,
            "{attempt:?} {retry:?} last={last}"
        );
    }
}

/// The same variant names as wasi:http's `error-code` (0.2 and 0.3), with
/// the payloads left out: what [`crate::not_sent_code!`] sees.
#[allow(dead_code)]
#[derive(Debug)]
enum ErrorCode {
    DnsTimeout,
    DnsError(()),
    DestinationNotFound,
    DestinationUnavailable,
    DestinationIpProhibited,
    DestinationIpUnroutable,
    ConnectionRefused,
    ConnectionTerminated,
    ConnectionTimeout,
    ConnectionReadTimeout,
    ConnectionWriteTimeout,
    ConnectionLimitReached,
    TlsProtocolError,
    TlsCertificateError,
    TlsAlertReceived(()),
    HttpRequestDenied,
    HttpRequestMethodInvalid,
    HttpRequestUriInvalid,
    HttpRequestUriTooLong,
    HttpResponseIncomplete,
    HttpResponseTimeout,
    HttpProtocolError,
    LoopDetected,
    ConfigurationError,
    InternalError(Option<String>),
}

#[test]
fn error_codes_before_sending_and_after() {
    for code in [
        ErrorCode::DnsError(()),
        ErrorCode::ConnectionRefused,
        ErrorCode::ConnectionTimeout,
        ErrorCode::TlsCertificateError,
        ErrorCode::HttpRequestDenied,
    ] {
        assert!(crate::not_sent_code!(code, ErrorCode), "{code:?}");
    }
    // What a host reports once the request may have left: the connection
    // broke or timed out after connecting (hyper's "connection closed
    // before message completed" is `HTTP-protocol-error` in wasmtime).
    for code in [
        ErrorCode::ConnectionTerminated,
        ErrorCode::ConnectionReadTimeout,
        ErrorCode::ConnectionWriteTimeout,
        ErrorCode::HttpResponseIncomplete,
        ErrorCode::HttpResponseTimeout,
        ErrorCode::HttpProtocolError,
        ErrorCode::InternalError(None),
    ] {
        assert!(!crate::not_sent_code!(code, ErrorCode), "{code:?}");
    }
}

#[test]
fn not_applied_header_values() {
    assert!(crate::transport::not_applied(&[b"1".to_vec()]));
    assert!(crate::transport::not_applied(&[b" 1 ".to_vec()]));
    assert!(!crate::transport::not_applied(&[]));
    assert!(!crate::transport::not_applied(&[b"0".to_vec()]));
}

/// An [`Io`] whose hosts answer from a script, in order.
struct Scripted {
    config: Result<Config, String>,
    script: RefCell<VecDeque<Result<HttpReply, NoReply>>>,
    /// The authorities posted to, in order.
    tried: RefCell<Vec<String>>,
}

impl Scripted {
    fn new(hosts: &str, script: Vec<Result<HttpReply, NoReply>>) -> Scripted {
        Scripted {
            config: Config::from_env(&[("LOCKD_URL".to_owned(), hosts.to_owned())]),
            script: RefCell::new(script.into()),
            tried: RefCell::new(Vec::new()),
        }
    }

    fn tried(&self) -> Vec<String> {
        std::mem::take(&mut self.tried.borrow_mut())
    }
}

impl Io for Scripted {
    const KEEP_ALIVE: bool = false;

    fn config(&self) -> &Result<Config, String> {
        &self.config
    }

    fn post(
        &self,
        _config: &Config,
        server: &Server,
        _route: Route,
        _body: Vec<u8>,
        _wait_ms: u32,
    ) -> impl Future<Output = Result<HttpReply, NoReply>> {
        self.tried.borrow_mut().push(server.authority.clone());
        let next = self.script.borrow_mut().pop_front();
        std::future::ready(next.expect("a post the script did not expect"))
    }

    fn random_bytes(&self) -> Vec<u8> {
        vec![7; 16]
    }
}

/// Runs a call over [`Scripted`], whose posts are ready at once.
fn run<T>(call: impl Future<Output = T>) -> T {
    match pin!(call)
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => value,
        Poll::Pending => unreachable!("a scripted call waited"),
    }
}

fn reply(status: u16, body: &str) -> Result<HttpReply, NoReply> {
    Ok(HttpReply {
        status,
        body: body.as_bytes().to_vec(),
        not_applied: false,
    })
}

fn draining() -> Result<HttpReply, NoReply> {
    Ok(HttpReply {
        status: 503,
        body: br#"{"status":"unavailable","message":"draining"}"#.to_vec(),
        not_applied: true,
    })
}

fn store_down() -> Result<HttpReply, NoReply> {
    reply(
        503,
        r#"{"status":"unavailable","message":"etcd unreachable"}"#,
    )
}

fn refused(host: &str) -> Result<HttpReply, NoReply> {
    Err(NoReply::NotSent(format!(
        "cannot reach {host}: ConnectionRefused"
    )))
}

fn lost(host: &str) -> Result<HttpReply, NoReply> {
    Err(NoReply::Unknown(format!(
        "cannot reach {host}: HttpProtocolError"
    )))
}

const GRANT: &str = r#"{"status":"acquired","fencing_token":5,"expires_at_ms":9}"#;
const UNLOCKED: &str = r#"{"status":"unlocked"}"#;

fn lock(io: &Scripted) -> Result<u64, Error> {
    let options = LockOptions {
        wait_ms: 0,
        durability: DurabilityWord::Persistent,
    };
    run(locks::lock(
        io,
        "n",
        "me",
        1000,
        &options,
        LockClaim::Exclusive,
    ))
    .map(|grant| grant.fencing_token)
}

#[test]
fn a_host_that_was_not_sent_to_passes_to_the_next_which_is_remembered() {
    let io = Scripted::new(
        "http://a:1,http://b:2,http://c:3",
        vec![refused("a"), reply(200, GRANT), reply(200, GRANT)],
    );
    assert_eq!(lock(&io), Ok(5));
    assert_eq!(io.tried(), ["a:1", "b:2"]);
    // The next call starts at the host that answered.
    assert_eq!(lock(&io), Ok(5));
    assert_eq!(io.tried(), ["b:2"]);
}

#[test]
fn one_pass_at_most_naming_every_host() {
    let io = Scripted::new("http://a:1,http://b:2", vec![refused("a"), refused("b")]);
    let Err(Error::Unavailable(message)) = lock(&io) else {
        panic!("not unavailable");
    };
    assert_eq!(io.tried(), ["a:1", "b:2"]);
    assert!(
        message.contains("cannot reach a") && message.contains("cannot reach b"),
        "{message}"
    );
    assert!(!message.contains("outcome is unknown"), "{message}");
}

#[test]
fn unknown_outcome_moves_on_only_when_safe() {
    // A lock by the same owner is a re-lock: safe.
    let io = Scripted::new("http://a:1,http://b:2", vec![lost("a"), reply(200, GRANT)]);
    assert_eq!(lock(&io), Ok(5));
    assert_eq!(io.tried(), ["a:1", "b:2"]);

    // An unlock by owner alone is not: answered at once, outcome unknown.
    let io = Scripted::new("http://a:1,http://b:2", vec![lost("a")]);
    let Err(Error::Unavailable(message)) = run(locks::unlock(&io, "n", "me", None)) else {
        panic!("not unavailable");
    };
    assert_eq!(io.tried(), ["a:1"]);
    assert!(message.contains("the outcome is unknown"), "{message}");

    // The negative control: with its token it is safe.
    let io = Scripted::new(
        "http://a:1,http://b:2",
        vec![lost("a"), reply(200, UNLOCKED)],
    );
    assert_eq!(run(locks::unlock(&io, "n", "me", Some(5))), Ok(()));
    assert_eq!(io.tried(), ["a:1", "b:2"]);

    // Every host lost it: unavailable, saying so.
    let io = Scripted::new("http://a:1,http://b:2", vec![lost("a"), lost("b")]);
    let Err(Error::Unavailable(message)) = lock(&io) else {
        panic!("not unavailable");
    };
    assert!(message.contains("the outcome is unknown"), "{message}");
}

#[test]
fn a_503_moves_on_if_marked_not_applied_or_if_safe() {
    let granted = r#"{"status":"granted","lease_id":"lease-1","ttl_ms":1000,"expires_at_ms":9,"durability":"persistent"}"#;
    let options = LeaseOptions {
        durability: DurabilityWord::Persistent,
        keep_alive: false,
    };
    // A lease grant is never repeated, but a draining host applied nothing.
    let io = Scripted::new(
        "http://a:1,http://b:2",
        vec![draining(), reply(200, granted)],
    );
    let lease = run(HeldLease::grant(&io, 1000, &options)).unwrap();
    assert_eq!(lease.id(), "lease-1");
    assert_eq!(io.tried(), ["a:1", "b:2"]);

    // A plain 503 may have been applied: the server's answer stands.
    let io = Scripted::new("http://a:1,http://b:2", vec![store_down()]);
    let outcome = run(HeldLease::grant(&io, 1000, &options)).map(|lease| lease.id().to_owned());
    assert_eq!(
        outcome,
        Err(Error::Unavailable("etcd unreachable".to_owned()))
    );
    assert_eq!(io.tried(), ["a:1"]);

    // ... unless the call is safe to repeat.
    let io = Scripted::new(
        "http://a:1,http://b:2",
        vec![store_down(), reply(200, GRANT)],
    );
    assert_eq!(lock(&io), Ok(5));
    assert_eq!(io.tried(), ["a:1", "b:2"]);

    // The last host's 503 is answered as it came; a 503 does not make its
    // host the one remembered.
    let io = Scripted::new(
        "http://a:1,http://b:2",
        vec![refused("a"), draining(), refused("a"), reply(200, GRANT)],
    );
    assert_eq!(lock(&io), Err(Error::Unavailable("draining".to_owned())));
    assert_eq!(lock(&io), Ok(5));
    assert_eq!(io.tried(), ["a:1", "b:2", "a:1", "b:2"]);
}

#[test]
fn a_request_that_cannot_be_made_tries_no_other_host() {
    let io = Scripted::new(
        "http://a:1,http://b:2",
        vec![Err(NoReply::Local("bad header".to_owned()))],
    );
    assert_eq!(lock(&io), Err(Error::Unavailable("bad header".to_owned())));
    assert_eq!(io.tried(), ["a:1"]);
}

#[test]
fn one_host_keeps_its_messages() {
    let io = Scripted::new("http://a:1", vec![refused("a")]);
    assert_eq!(
        lock(&io),
        Err(Error::Unavailable(
            "cannot reach a: ConnectionRefused".to_owned()
        ))
    );
    let io = Scripted::new("ftp://a:1", vec![]);
    let Err(Error::Unavailable(message)) = lock(&io) else {
        panic!("not unavailable");
    };
    assert!(
        message.contains("is not an http:// or https:// URL"),
        "{message}"
    );
    assert!(io.tried().is_empty());
}
