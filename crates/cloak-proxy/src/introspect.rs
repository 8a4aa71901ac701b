//! `COMMAND`, `COMMAND COUNT|LIST|INFO|DOCS`: the command table ([`crate::cmd::table`]) in
//! Redis's reply shapes. Nothing here reaches the storage server.

use bytes::Bytes;

use crate::cmd::CommandQuery;
use crate::cmd::table::{COMMANDS, Spec, find};
use crate::resp::Reply;

pub fn answer(query: &CommandQuery) -> Reply {
    match query {
        CommandQuery::Count => Reply::Integer(COMMANDS.len() as i64),
        CommandQuery::List => Reply::Array(COMMANDS.iter().map(|s| Reply::bulk(s.name)).collect()),
        CommandQuery::All => Reply::Array(COMMANDS.iter().map(info).collect()),
        CommandQuery::Info(names) if names.is_empty() => answer(&CommandQuery::All),
        CommandQuery::Info(names) => Reply::Array(
            names
                .iter()
                .map(|name| lookup(name).map_or(Reply::Bulk(None), info))
                .collect(),
        ),
        CommandQuery::Docs(names) if names.is_empty() => docs_of(COMMANDS.iter()),
        CommandQuery::Docs(names) => docs_of(names.iter().filter_map(|name| lookup(name))),
    }
}

/// A command or, as `container|sub`, a subcommand.
fn lookup(name: &Bytes) -> Option<&'static Spec> {
    let name = String::from_utf8_lossy(name);
    let mut parts = name.splitn(2, '|');
    let command = find(COMMANDS, parts.next()?)?;
    match parts.next() {
        None => Some(command),
        Some(sub) => find(command.subcommands(), sub),
    }
}

/// `COMMAND INFO`'s ten fields. Tips and key specifications are left empty: first key, last
/// key and step already say where the keys are for every supported command.
fn info(spec: &Spec) -> Reply {
    let statuses =
        |words: &[&'static str]| Reply::Set(words.iter().map(|&w| Reply::status(w)).collect());
    let (first, last, step) = spec.keys;
    Reply::Array(vec![
        Reply::bulk(spec.name),
        Reply::Integer(spec.arity.into()),
        statuses(spec.flags),
        Reply::Integer(first.into()),
        Reply::Integer(last.into()),
        Reply::Integer(step.into()),
        statuses(spec.acl),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(spec.subcommands().iter().map(info).collect()),
    ])
}

fn docs_of<'a>(specs: impl Iterator<Item = &'a Spec>) -> Reply {
    Reply::map(specs.map(|spec| (spec.name, docs(spec))))
}

fn docs(spec: &Spec) -> Reply {
    let mut fields = vec![
        ("summary", Reply::bulk(spec.summary)),
        ("since", Reply::bulk(spec.since)),
        ("group", Reply::bulk(spec.group)),
    ];
    if !spec.subcommands().is_empty() {
        fields.push(("subcommands", docs_of(spec.subcommands().iter())));
    }
    Reply::map(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info_of(name: &str) -> Reply {
        match answer(&CommandQuery::Info(vec![Bytes::from(name.to_string())])) {
            Reply::Array(mut entries) => entries.remove(0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn info_and_docs_come_from_the_table() {
        // As `redis-server` 7 answers `COMMAND INFO get`, less its key specification.
        assert_eq!(
            info_of("GET"),
            Reply::Array(vec![
                Reply::bulk("get"),
                Reply::Integer(2),
                Reply::Set(vec![Reply::status("readonly"), Reply::status("fast")]),
                Reply::Integer(1),
                Reply::Integer(1),
                Reply::Integer(1),
                Reply::Set(vec![
                    Reply::status("@read"),
                    Reply::status("@string"),
                    Reply::status("@fast")
                ]),
                Reply::Array(vec![]),
                Reply::Array(vec![]),
                Reply::Array(vec![]),
            ])
        );
        assert_eq!(info_of("nosuch"), Reply::Bulk(None));
        match info_of("client|setname") {
            Reply::Array(fields) => assert_eq!(fields[0], Reply::bulk("client|setname")),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            answer(&CommandQuery::Count),
            Reply::Integer(COMMANDS.len() as i64)
        );
        let docs = answer(&CommandQuery::Docs(vec![
            Bytes::from_static(b"get"),
            Bytes::from_static(b"nosuch"),
        ]));
        assert_eq!(
            docs,
            Reply::map([(
                "get",
                Reply::map([
                    ("summary", Reply::bulk("Get the value of a key")),
                    ("since", Reply::bulk("1.0.0")),
                    ("group", Reply::bulk("string")),
                ])
            )])
        );
    }
}
