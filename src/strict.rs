//! Input strings that must be one of an enum's values, exactly as the OpenAPI document lists
//! them: the JSON API refuses (422, naming the field) any other spelling, while the Rust side
//! keeps the plain `String` field that pages, manifests and the CLI fill in themselves.
//!
//! Use on an `Option<String>` field with `#[serde(default, deserialize_with =
//! "crate::strict::one_of::<_, E>")]` and `#[schemars(with = "Option<E>")]`, where `E` is a
//! unit-variant enum deriving `Deserialize`, `Serialize` and `JsonSchema`.

use serde::{Deserialize, Deserializer, Serialize};

/// Reads an optional value of `E` and keeps it as the string serde writes for it.
pub fn one_of<'de, D, E>(d: D) -> Result<Option<String>, D::Error>
where
    D: Deserializer<'de>,
    E: Deserialize<'de> + Serialize,
{
    let Some(value) = Option::<E>::deserialize(d)? else {
        return Ok(None);
    };
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => Ok(Some(s)),
        _ => Err(serde::de::Error::custom("not a string enum")),
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Deserialize, Serialize)]
    #[serde(rename_all = "UPPERCASE")]
    enum Protocol {
        Plaintext,
        #[serde(rename = "SASL_SSL")]
        SaslSsl,
    }

    #[derive(Deserialize, Debug)]
    struct Input {
        #[serde(default, deserialize_with = "super::one_of::<_, Protocol>")]
        protocol: Option<String>,
    }

    #[test]
    fn only_the_listed_spellings_are_read() {
        let read = |j: &str| serde_json::from_str::<Input>(j).map(|i| i.protocol);
        assert_eq!(
            read(r#"{"protocol": "SASL_SSL"}"#).unwrap().as_deref(),
            Some("SASL_SSL")
        );
        assert_eq!(read(r#"{"protocol": null}"#).unwrap(), None);
        assert_eq!(read("{}").unwrap(), None);
        for bad in [r#""sasl_ssl""#, r#""""#, "1", r#""PLAINTEXT ""#] {
            assert!(
                read(&format!(r#"{{"protocol": {bad}}}"#)).is_err(),
                "{bad} was read"
            );
        }
    }
}
