//! WASI 0.3 on the stock host: `stock-host run-p3`, the equivalent of
//! `wasmtime run -Wcomponent-model-async -Sp3,http --invoke ...` (with
//! several `--invoke`s at once). Still nothing of lockd: the engine has
//! component-model async, the linker WASI 0.3
//! (`wasmtime_wasi::p3::add_to_linker`) and `wasi:http@0.3`
//! (`wasmtime_wasi_http::p3::add_to_linker`), and WASI 0.2 with its
//! `wasi:http` as well, since Rust's standard library on `wasm32-wasip2`
//! imports WASI 0.2 beside a component's 0.3 imports (wasmtime's CLI links
//! both too).
//!
//! [`invoke_concurrently`] instantiates a component once and calls the
//! exported functions it is given all at once, each as its own task
//! (`Func::call_concurrent` inside `Store::run_concurrent`), reporting each
//! result as it arrives. An invocation is written `NAME(ARGS)` or
//! `INTERFACE#NAME(ARGS)`, for example
//! `lockd:p3-probe/probe#wait-lock("jobs", "me", 5000)`: arguments are
//! string literals in double quotes (escapes `\"`, `\\`, `\n`), integers,
//! `true`/`false` and enum cases (`shared-hold`), checked against the
//! function's parameter types.
//! Results are written in the WAVE style (`ok((5, ended-elsewhere))`).

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use anyhow::{anyhow, bail, Context as _, Result};
use wasmtime::component::{Component, Linker, Type, Val};
use wasmtime::{Config, Engine, Store};

use crate::stock_host::StockState;

/// The engine of `wasmtime run -Wcomponent-model-async`.
pub fn engine() -> Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.wasm_component_model_async(true);
    Engine::new(&config).map_err(|e| anyhow!("creating the engine: {e:?}"))
}

/// A linker with WASI 0.3 and `wasi:http@0.3`, and WASI 0.2 with its
/// `wasi:http`.
pub fn linker(engine: &Engine) -> Result<Linker<StockState>> {
    let mut linker = crate::stock_host::linker(engine)?;
    wasmtime_wasi::p3::add_to_linker(&mut linker).map_err(|e| anyhow!("{e:?}"))?;
    wasmtime_wasi_http::p3::add_to_linker(&mut linker).map_err(|e| anyhow!("{e:?}"))?;
    Ok(linker)
}

/// One `--invoke`: the function to call and its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The exported interface that has the function, if not the root.
    pub interface: Option<String>,
    pub function: String,
    pub args: Vec<Literal>,
}

/// An argument as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    String(String),
    Integer(i128),
    Bool(bool),
    /// A bare kebab-case word: an enum case.
    Label(String),
}

impl std::str::FromStr for Invocation {
    type Err = anyhow::Error;

    /// `NAME(ARGS)` or `INTERFACE#NAME(ARGS)`.
    fn from_str(text: &str) -> Result<Invocation> {
        let text = text.trim();
        let (target, args) = text
            .strip_suffix(')')
            .and_then(|t| t.split_once('('))
            .with_context(|| format!("--invoke {text:?} is not NAME(ARGS)"))?;
        let (interface, function) = match target.rsplit_once('#') {
            Some((interface, function)) => (Some(interface.to_string()), function),
            None => (None, target),
        };
        if function.is_empty() {
            bail!("--invoke {text:?} names no function");
        }
        Ok(Invocation {
            interface,
            function: function.to_string(),
            args: parse_args(args).with_context(|| format!("--invoke {text:?}"))?,
        })
    }
}

/// Comma-separated literals.
fn parse_args(text: &str) -> Result<Vec<Literal>> {
    let mut args = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            return Ok(args);
        };
        if first == '"' {
            chars.next();
            let mut s = String::new();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('n') => s.push('\n'),
                        Some(c @ ('"' | '\\')) => s.push(c),
                        other => bail!("unknown escape \\{}", other.unwrap_or(' ')),
                    },
                    Some(c) => s.push(c),
                    None => bail!("a string argument has no closing quote"),
                }
            }
            args.push(Literal::String(s));
        } else {
            let mut word = String::new();
            while let Some(c) = chars.next_if(|c| *c != ',' && !c.is_whitespace()) {
                word.push(c);
            }
            args.push(match word.as_str() {
                "true" => Literal::Bool(true),
                "false" => Literal::Bool(false),
                _ if word.starts_with(|c: char| c.is_ascii_lowercase())
                    && word
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') =>
                {
                    Literal::Label(word)
                }
                _ => Literal::Integer(word.parse().map_err(|_| {
                    anyhow!("argument {word:?} is no string, integer, true/false or enum case")
                })?),
            });
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.next() {
            None => return Ok(args),
            Some(',') => {}
            Some(c) => bail!("expected ',' between arguments, found {c:?}"),
        }
    }
}

/// `literal` as a value of `ty`.
fn value(literal: &Literal, ty: &Type) -> Result<Val> {
    let int = |n: i128| -> Result<Val> {
        let out_of_range = || anyhow!("{n} does not fit {ty:?}");
        Ok(match ty {
            Type::U8 => Val::U8(n.try_into().map_err(|_| out_of_range())?),
            Type::U16 => Val::U16(n.try_into().map_err(|_| out_of_range())?),
            Type::U32 => Val::U32(n.try_into().map_err(|_| out_of_range())?),
            Type::U64 => Val::U64(n.try_into().map_err(|_| out_of_range())?),
            Type::S8 => Val::S8(n.try_into().map_err(|_| out_of_range())?),
            Type::S16 => Val::S16(n.try_into().map_err(|_| out_of_range())?),
            Type::S32 => Val::S32(n.try_into().map_err(|_| out_of_range())?),
            Type::S64 => Val::S64(n.try_into().map_err(|_| out_of_range())?),
            _ => bail!("an integer where {ty:?} is due"),
        })
    };
    match (literal, ty) {
        (Literal::String(s), Type::String) => Ok(Val::String(s.clone())),
        (Literal::Bool(b), Type::Bool) => Ok(Val::Bool(*b)),
        (Literal::Integer(n), _) => int(*n),
        (Literal::Label(name), Type::Enum(cases)) => {
            if cases.names().any(|case| case == name) {
                Ok(Val::Enum(name.clone()))
            } else {
                let cases: Vec<&str> = cases.names().collect();
                bail!("{name:?} is not a case of the enum due: {cases:?}")
            }
        }
        (literal, ty) => {
            bail!(
                "{literal:?} where {ty:?} is due (--invoke takes strings, integers, booleans \
                 and enum cases)"
            )
        }
    }
}

/// `val` in the WAVE style: `ok((5, ended-elsewhere))`, `some("x")`.
pub fn wave(val: &Val) -> String {
    let mut out = String::new();
    write_wave(&mut out, val);
    out
}

fn write_wave(out: &mut String, val: &Val) {
    let list = |out: &mut String, items: &[Val], open: &str, close: &str| {
        out.push_str(open);
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            write_wave(out, item);
        }
        out.push_str(close);
    };
    let wrapped = |out: &mut String, name: &str, inner: &Option<Box<Val>>| {
        out.push_str(name);
        if let Some(inner) = inner {
            out.push('(');
            write_wave(out, inner);
            out.push(')');
        }
    };
    match val {
        Val::Bool(b) => write!(out, "{b}").unwrap(),
        Val::S8(n) => write!(out, "{n}").unwrap(),
        Val::U8(n) => write!(out, "{n}").unwrap(),
        Val::S16(n) => write!(out, "{n}").unwrap(),
        Val::U16(n) => write!(out, "{n}").unwrap(),
        Val::S32(n) => write!(out, "{n}").unwrap(),
        Val::U32(n) => write!(out, "{n}").unwrap(),
        Val::S64(n) => write!(out, "{n}").unwrap(),
        Val::U64(n) => write!(out, "{n}").unwrap(),
        Val::String(s) => write!(out, "{s:?}").unwrap(),
        Val::Enum(name) => out.push_str(name),
        Val::Tuple(items) => list(out, items, "(", ")"),
        Val::List(items) => list(out, items, "[", "]"),
        Val::Option(None) => out.push_str("none"),
        Val::Option(some) => wrapped(out, "some", some),
        Val::Result(Ok(inner)) => wrapped(out, "ok", inner),
        Val::Result(Err(inner)) => wrapped(out, "err", inner),
        Val::Variant(name, inner) => wrapped(out, name, inner),
        Val::Record(fields) => {
            out.push('{');
            for (i, (name, field)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write!(out, "{name}: ").unwrap();
                write_wave(out, field);
            }
            out.push('}');
        }
        other => write!(out, "{other:?}").unwrap(),
    }
}

/// A call in flight: its position among the invocations and its result.
type Call<'a> = Pin<Box<dyn Future<Output = (usize, Result<String>)> + Send + 'a>>;

/// Instantiates `component` in a store holding `state` and calls every
/// invocation at once, each as its own task; `report(i, result)` hears of
/// the `i`th as it returns (its result in the WAVE style). An error if the
/// component cannot be instantiated or an invocation does not match an
/// export; a trap is the call's `Err`.
pub async fn invoke_concurrently(
    engine: &Engine,
    component: &Component,
    state: StockState,
    invocations: &[Invocation],
    mut report: impl FnMut(usize, Result<String>),
) -> Result<()> {
    let mut store = Store::new(engine, state);
    let instance = linker(engine)?
        .instantiate_async(&mut store, component)
        .await
        .map_err(|e| anyhow!("instantiating: {e:?}"))?;
    let mut prepared = Vec::new();
    for invocation in invocations {
        let interface = match &invocation.interface {
            Some(name) => Some(
                instance
                    .get_export_index(&mut store, None, name)
                    .with_context(|| format!("the component exports no {name}"))?,
            ),
            None => None,
        };
        let name = &invocation.function;
        let func = instance
            .get_export_index(&mut store, interface.as_ref(), name)
            .and_then(|index| instance.get_func(&mut store, index))
            .with_context(|| format!("the component exports no function {name}"))?;
        let ty = func.ty(&store);
        if ty.params().len() != invocation.args.len() {
            bail!(
                "{name} takes {} arguments, --invoke gave {}",
                ty.params().len(),
                invocation.args.len()
            );
        }
        let params = ty
            .params()
            .zip(&invocation.args)
            .map(|((param, ty), literal)| {
                value(literal, &ty).with_context(|| format!("{name}'s parameter {param}"))
            })
            .collect::<Result<Vec<Val>>>()?;
        prepared.push((func, params, ty.results().len()));
    }
    store
        .run_concurrent(async |accessor| {
            let mut calls: Vec<Option<Call<'_>>> = prepared
                .into_iter()
                .enumerate()
                .map(|(i, (func, params, results))| {
                    let call: Call<'_> = Box::pin(async move {
                        let mut out = vec![Val::Bool(false); results];
                        let result = func
                            .call_concurrent(accessor, &params, &mut out)
                            .await
                            .map(|()| out.iter().map(wave).collect::<Vec<_>>().join(", "))
                            .map_err(|e| anyhow!("{e:?}"));
                        (i, result)
                    });
                    Some(call)
                })
                .collect();
            std::future::poll_fn(|cx| {
                for slot in &mut calls {
                    if let Some(call) = slot {
                        if let Poll::Ready((i, result)) = call.as_mut().poll(cx) {
                            report(i, result);
                            *slot = None;
                        }
                    }
                }
                if calls.iter().all(Option::is_none) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        })
        .await
        .map_err(|e| anyhow!("{e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invocations_parse() {
        let call: Invocation = r#"lockd:p3-probe/probe#wait-lock("a \"b\"", "me", 5000)"#
            .parse()
            .unwrap();
        assert_eq!(call.interface.as_deref(), Some("lockd:p3-probe/probe"));
        assert_eq!(call.function, "wait-lock");
        assert_eq!(
            call.args,
            [
                Literal::String("a \"b\"".into()),
                Literal::String("me".into()),
                Literal::Integer(5000)
            ]
        );
        let call: Invocation = "ping(true, -3)".parse().unwrap();
        assert_eq!(call.interface, None);
        assert_eq!(call.args, [Literal::Bool(true), Literal::Integer(-3)]);
        assert!("ping".parse::<Invocation>().is_err());
        assert!(r#"f("open)"#.parse::<Invocation>().is_err());
        let call: Invocation = "f(shared-hold)".parse().unwrap();
        assert_eq!(call.args, [Literal::Label("shared-hold".into())]);
        assert!("f(Maybe)".parse::<Invocation>().is_err());
        assert!(value(&Literal::Integer(-1), &Type::U32).is_err());
    }

    #[test]
    fn values_print_as_wave() {
        let val = Val::Result(Ok(Some(Box::new(Val::Tuple(vec![
            Val::U64(5),
            Val::Enum("ended-elsewhere".into()),
        ])))));
        assert_eq!(wave(&val), "ok((5, ended-elsewhere))");
        let err = Val::Result(Err(Some(Box::new(Val::Variant(
            "denied".into(),
            Some(Box::new(Val::String("no".into()))),
        )))));
        assert_eq!(wave(&err), r#"err(denied("no"))"#);
    }
}
