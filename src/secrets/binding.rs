//! Where a stored secret may go. Each secret field is bound to the settings that say who
//! receives it (a database's host, port and user; a Kafka cluster's bootstrap servers, SASL
//! mechanism and user; a Connect cluster's URL and user; an object store's endpoint and region).
//!
//! Invariant: a change to any of those settings must carry the secret again in the same
//! change, or it is refused. Otherwise anyone who may edit a connection, but may never read its
//! password, could point it at a server of their own and have ClueCDC send the password there.
//! Every service that stores such a secret (connections, Kafka and Connect clusters, and
//! whatever applies a document through them) asks `refusals` before it writes.

use serde::Serialize;

use crate::error::FieldErrors;

/// One secret field and the settings it is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    pub secret: &'static str,
    pub settings: &'static [&'static str],
}

/// A stored secret whose binding a change touches, with the settings that changed. Serialized
/// (in audit rows) as `{field, settings}`: the audit drops any key that looks secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rebound {
    #[serde(rename = "field")]
    pub secret: &'static str,
    pub settings: Vec<&'static str>,
}

/// The stored secrets (`stored` names the fields that hold a value) whose bound settings are
/// among `changed`.
pub fn rebound(bindings: &[Binding], changed: &[&str], stored: &[String]) -> Vec<Rebound> {
    bindings
        .iter()
        .filter(|b| stored.iter().any(|s| s == b.secret))
        .filter_map(|b| {
            let settings: Vec<&'static str> = b
                .settings
                .iter()
                .copied()
                .filter(|s| changed.contains(s))
                .collect();
            (!settings.is_empty()).then_some(Rebound {
                secret: b.secret,
                settings,
            })
        })
        .collect()
}

/// The refusals for rebound secrets that the change does not give again, keyed
/// `<prefix><secret>` (the field the caller would fill in).
pub fn refusals(rebound: &[Rebound], given: impl Fn(&str) -> bool, prefix: &str) -> FieldErrors {
    rebound
        .iter()
        .filter(|r| !given(r.secret))
        .map(|r| (format!("{prefix}{}", r.secret), message(r)))
        .collect()
}

/// "the password must be given again when the host and port change".
pub fn message(r: &Rebound) -> String {
    let names: Vec<&str> = r.settings.iter().map(|s| label(s)).collect();
    let (list, verb) = match names.as_slice() {
        [one] => (one.to_string(), "changes"),
        [init @ .., last] => (format!("{} and {last}", init.join(", ")), "change"),
        [] => (String::from("its address"), "changes"),
    };
    format!(
        "the {} must be given again when the {list} {verb}: a stored secret goes only where it was given for",
        label(r.secret)
    )
}

fn label(field: &str) -> &str {
    match field {
        "password" => "password",
        "sasl_password" => "SASL password",
        "basic_auth_password" => "basic auth password",
        "access_key_id" => "access key id",
        "secret_access_key" => "secret access key",
        "session_token" => "session token",
        "bootstrap_servers" => "bootstrap servers",
        "sasl_mechanism" => "SASL mechanism",
        "sasl_username" => "SASL user",
        "basic_auth_user" => "basic auth user",
        "url" => "URL",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DB: &[Binding] = &[Binding {
        secret: "password",
        settings: &["host", "port", "user"],
    }];

    #[test]
    fn a_changed_host_rebinds_the_stored_password_and_names_the_setting() {
        let r = rebound(DB, &["host", "database"], &["password".into()]);
        assert_eq!(
            r,
            vec![Rebound {
                secret: "password",
                settings: vec!["host"]
            }]
        );
        let e = refusals(&r, |_| false, "secrets.");
        assert_eq!(
            e["secrets.password"],
            "the password must be given again when the host changes: a stored secret goes only where it was given for"
        );
    }

    #[test]
    fn several_changed_settings_are_listed_together() {
        let r = rebound(DB, &["user", "host", "port"], &["password".into()]);
        assert!(message(&r[0]).contains("when the host, port and user change"));
    }

    #[test]
    fn settings_outside_the_binding_and_secrets_not_stored_rebind_nothing() {
        assert!(rebound(DB, &["database", "tls_mode", "name"], &["password".into()]).is_empty());
        assert!(rebound(DB, &["host"], &[]).is_empty());
    }

    #[test]
    fn a_secret_given_again_in_the_same_change_is_not_refused() {
        let r = rebound(DB, &["host"], &["password".into()]);
        assert!(refusals(&r, |f| f == "password", "secrets.").is_empty());
    }
}
