//! CBOR ⇄ JSON value conversion as the reference does it (see
//! docs/wire-formats.md): CBOR is read through serde into a JSON value, so byte
//! strings and maps with non-string keys cannot be represented, tag-2
//! bignums that fit become numbers and `undefined` becomes `null`.

use std::io::Cursor;

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Encodes any serialisable value (usually a JSON value) as CBOR.
pub fn to_cbor(value: &impl Serialize) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).context("encode value as cbor")?;
    Ok(out)
}

/// Decodes CBOR into `T` (trailing bytes are ignored, as in the reference).
pub fn from_cbor<T: DeserializeOwned>(bytes: &[u8]) -> anyhow::Result<T> {
    ciborium::from_reader(Cursor::new(bytes)).context("decode cbor")
}

/// CBOR → JSON value; empty input is `null`.
pub fn cbor_to_json(bytes: &[u8]) -> anyhow::Result<Value> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    from_cbor(bytes)
}

/// CBOR → JSON value; anything not representable as JSON is `null`.
pub fn cbor_to_json_or_null(bytes: &[u8]) -> Value {
    cbor_to_json(bytes).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn round_trips_json_values() {
        let value = json!({"a": [1, -2, 1.5, "x", null, true], "b": {"c": "d"}});
        assert_eq!(cbor_to_json(&to_cbor(&value).unwrap()).unwrap(), value);
    }

    #[test]
    fn empty_is_null() {
        assert_eq!(cbor_to_json(&[]).unwrap(), Value::Null);
        assert_eq!(cbor_to_json_or_null(&[]), Value::Null);
    }

    #[test]
    fn unrepresentable_values_become_null() {
        // h'0102' (a byte string)
        assert!(cbor_to_json(&hex("420102")).is_err());
        assert_eq!(cbor_to_json_or_null(&hex("420102")), Value::Null);
        // {1: "a"} (a non-string key)
        assert_eq!(cbor_to_json_or_null(&hex("a1016161")), Value::Null);
        // [h'00'] — a byte string anywhere nulls the whole value
        assert_eq!(cbor_to_json_or_null(&hex("814100")), Value::Null);
        // garbage
        assert_eq!(cbor_to_json_or_null(&[0xff, 0x00]), Value::Null);
    }

    #[test]
    fn undefined_is_null_and_small_bignums_are_numbers() {
        assert_eq!(cbor_to_json(&hex("f7")).unwrap(), Value::Null);
        // 2(h'0100') = 256
        assert_eq!(cbor_to_json(&hex("c2420100")).unwrap(), json!(256));
    }
}
