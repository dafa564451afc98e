//! Parsing a strategy's JSON configuration.

use serde::de::DeserializeOwned;

/// Parses a JSON object into `T`; empty text or `null` gives `T::default()`.
/// Declare `T` with `#[serde(deny_unknown_fields, default)]` so an unknown key
/// is an error naming it.
pub fn parse<T: DeserializeOwned + Default>(config: &str) -> Result<T, String> {
    let trimmed = config.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return Ok(T::default());
    }
    let value: serde_json::Value =
        serde_json::from_str(trimmed).map_err(|e| format!("config is not valid JSON: {e}"))?;
    if !value.is_object() {
        return Err("config must be a JSON object".to_owned());
    }
    serde_json::from_value(value).map_err(|e| format!("invalid config: {e}"))
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize, Default, Debug, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Settings {
        limit: u32,
    }

    #[test]
    fn empty_is_default_and_unknown_keys_are_named() {
        assert_eq!(super::parse::<Settings>("").unwrap(), Settings::default());
        assert_eq!(super::parse::<Settings>(" null ").unwrap(), Settings::default());
        assert_eq!(super::parse::<Settings>(r#"{"limit":3}"#).unwrap(), Settings { limit: 3 });
        let err = super::parse::<Settings>(r#"{"limt":3}"#).unwrap_err();
        assert!(err.contains("limt"), "{err}");
        assert!(super::parse::<Settings>("[1]").unwrap_err().contains("object"));
        assert!(super::parse::<Settings>("{").unwrap_err().contains("JSON"));
    }
}
