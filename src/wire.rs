//! Input fields that domain code keeps as strings but the API reads as closed sets: a value
//! outside the set fails deserialization, so the API answers 422 naming the field, and the
//! OpenAPI document (which lists the set, `#[schemars(with = "Option<TheEnum>")]`) and the
//! server agree on what is accepted.
//!
//! Invariant: the string kept is the enum's serde spelling, exactly what the domain's own
//! parsers accept, so forms and manifests (which build the same input types from text) and
//! the JSON API end in the same validation.

use serde::de::value::{Error as ValueError, StrDeserializer};
use serde::de::IntoDeserializer;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// `text` as a value of `E`, kept as `E`'s spelling; the error names the accepted values.
fn one_of<E, Er>(text: &str) -> Result<String, Er>
where
    E: for<'a> Deserialize<'a> + Serialize,
    Er: serde::de::Error,
{
    let de: StrDeserializer<'_, ValueError> = text.into_deserializer();
    let e = E::deserialize(de).map_err(|e| Er::custom(e.to_string()))?;
    match serde_json::to_value(&e) {
        Ok(Value::String(s)) => Ok(s),
        _ => Err(Er::custom("expected a unit enum variant")),
    }
}

/// `Option<String>` read as `Option<E>` (`null` and absent: `None`).
pub fn enum_string<'de, D, E>(d: D) -> Result<Option<String>, D::Error>
where
    D: Deserializer<'de>,
    E: for<'a> Deserialize<'a> + Serialize,
{
    Option::<String>::deserialize(d)?
        .map(|s| one_of::<E, D::Error>(&s))
        .transpose()
}

/// `Option<Vec<String>>` read as `Option<Vec<E>>`.
pub fn enum_strings<'de, D, E>(d: D) -> Result<Option<Vec<String>>, D::Error>
where
    D: Deserializer<'de>,
    E: for<'a> Deserialize<'a> + Serialize,
{
    Option::<Vec<String>>::deserialize(d)?
        .map(|list| list.iter().map(|s| one_of::<E, D::Error>(s)).collect())
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Serialize)]
    #[serde(rename_all = "lowercase")]
    enum Colour {
        Red,
        Blue,
    }

    #[derive(Deserialize)]
    struct Input {
        #[serde(default, deserialize_with = "enum_string::<_, Colour>")]
        one: Option<String>,
        #[serde(default, deserialize_with = "enum_strings::<_, Colour>")]
        many: Option<Vec<String>>,
    }

    #[test]
    fn values_of_the_set_are_kept_as_their_spelling_and_others_name_the_field() {
        let ok: Input = serde_json::from_str(r#"{"one": "red", "many": ["blue", "red"]}"#).unwrap();
        assert_eq!(ok.one.as_deref(), Some("red"));
        assert_eq!(ok.many.unwrap(), vec!["blue", "red"]);
        let absent: Input = serde_json::from_str(r#"{"one": null}"#).unwrap();
        assert!(absent.one.is_none() && absent.many.is_none());
        let mut de = serde_json::Deserializer::from_str(r#"{"many": ["red", "RED"]}"#);
        let err = serde_path_to_error::deserialize::<_, Input>(&mut de)
            .err()
            .unwrap();
        assert_eq!(err.path().to_string(), "many");
        assert!(err.inner().to_string().contains("unknown variant `RED`"));
        assert!(serde_json::from_str::<Input>(r#"{"one": " red"}"#).is_err());
        let mut de = serde_json::Deserializer::from_str(r#"{"one": 3}"#);
        let err = serde_path_to_error::deserialize::<_, Input>(&mut de)
            .err()
            .unwrap();
        assert_eq!(err.path().to_string(), "one");
        assert!(err.inner().to_string().contains("expected a string"));
    }
}
