//! Server-set metadata: uids, timestamps, generated names, name rules and `managedFields`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A pseudo-random number, different on every call (splitmix64 over time and a counter).
fn next_random() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = nanos.wrapping_add(
        COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15),
    );
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A new uid in the form Kubernetes uses (a version 4 UUID).
pub(super) fn uid() -> String {
    let (a, b) = (next_random(), next_random());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// `generateName` plus five random characters, as the server makes names.
pub(super) fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = next_random();
    let mut name = prefix.to_owned();
    for _ in 0..5 {
        name.push(char::from(ALPHABET[(r % ALPHABET.len() as u64) as usize]));
        r /= ALPHABET.len() as u64;
    }
    name
}

/// Now, as RFC 3339 in UTC with seconds (`2025-01-02T03:04:05Z`), as `metav1.Time` is.
pub(super) fn now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

fn rfc3339(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The rule a kind's names follow; `Err` is the validation message.
pub(super) fn check_name(plural: &str, name: &str) -> Result<(), String> {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    let ok = match plural {
        // Services and namespaces: a DNS label (services: RFC 1035, starting with a letter).
        "services" => label(name) && name.starts_with(|c: char| c.is_ascii_lowercase()),
        "namespaces" => label(name),
        _ => name.len() <= 253 && name.split('.').all(label),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "Invalid value: \"{name}\": a lowercase RFC 1123 name must consist of lower case \
             alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
             character"
        ))
    }
}

/// Records a write by `manager` in `metadata.managedFields`, replacing that manager's earlier
/// entry for the same operation and subresource, as the server's field manager does.
pub(super) fn record_manager(
    object: &mut Map<String, Value>,
    old: Option<&Value>,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
) {
    let mut fields = Map::new();
    for (k, v) in object.iter() {
        let wanted = match subresource {
            Some(_) => k == "status",
            None => !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"),
        };
        if wanted {
            fields.insert(format!("f:{k}"), leaf_fields(v));
        }
    }
    let mut entry = json!({
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(sub) = subresource {
        entry["subresource"] = json!(sub);
    }
    let mut entries: Vec<Value> = old
        .and_then(|o| o.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    entries.retain(|e| {
        e.get("manager") != Some(&json!(manager))
            || e.get("subresource").and_then(Value::as_str) != subresource
    });
    entries.push(entry);
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        meta.insert("managedFields".to_owned(), Value::Array(entries));
    }
}

/// One level of field names (`{"f:ports":{}}`), enough to look like the real thing.
fn leaf_fields(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.keys().map(|k| (format!("f:{k}"), json!({}))).collect())
        }
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_735_787_045), "2025-01-02T03:04:05Z");
    }

    #[test]
    fn names() {
        assert!(check_name("services", "reviews").is_ok());
        assert!(check_name("services", "1abc").is_err());
        assert!(check_name("endpointslices", "reviews-abc12").is_ok());
        assert!(check_name("events", "pod.17a3b").is_ok());
        assert!(check_name("pods", "Bad").is_err());
        assert!(check_name("pods", "").is_err());
        assert_eq!(uid().len(), 36);
        assert!(generated_name("web-").starts_with("web-"));
    }
}
