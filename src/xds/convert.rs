//! xDS resources → rule files. Each `RateLimitConfig` becomes the rule file it stands for
//! (JSON, which the YAML loader reads as it is), so an xDS push is compiled by exactly the code
//! that compiles files, with `MERGE_DOMAIN_CONFIG` and every check; only the origin differs:
//! errors name the resource and the field instead of a file, line and column.

use prost::Message;
use prost_types::value::Kind;
use serde_json::{Map, Value, json};

use crate::config::{ConfigError, ConfigErrors, LoadOptions, Loaded};
use crate::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

/// The type URL of the resources Turnstile subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Compiles every resource of a response into one rule set, or says what is wrong with which
/// resource and field.
pub fn compile(
    resources: &[prost_types::Any],
    options: LoadOptions,
) -> Result<Loaded, ConfigErrors> {
    let mut files = Vec::with_capacity(resources.len());
    let mut errors = Vec::new();
    for (index, any) in resources.iter().enumerate() {
        match decode(index, any) {
            Ok((origin, config)) => files.push((origin, rule_file(&config))),
            Err(error) => errors.push(error),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    crate::config::parse_files(&files, options).map_err(|ConfigErrors(errors)| {
        // The text was generated here: its lines and columns mean nothing to the operator,
        // the resource and the field path do.
        ConfigErrors(
            errors
                .into_iter()
                .map(|e| ConfigError {
                    line: 0,
                    column: 0,
                    ..e
                })
                .collect(),
        )
    })
}

fn decode(index: usize, any: &prost_types::Any) -> Result<(String, RateLimitConfig), ConfigError> {
    let failure = |message: String| ConfigError {
        origin: format!("xDS resource #{index}"),
        line: 0,
        column: 0,
        path: String::new(),
        message,
    };
    if any.type_url != TYPE_URL {
        return Err(failure(format!(
            "has type {:?}; Turnstile subscribes to {TYPE_URL}",
            any.type_url
        )));
    }
    let config = RateLimitConfig::decode(any.value.as_slice())
        .map_err(|e| failure(format!("does not decode as a RateLimitConfig: {e}")))?;
    let origin = if config.name.is_empty() {
        format!("xDS resource #{index} (domain {:?})", config.domain)
    } else {
        format!("xDS resource {:?}", config.name)
    };
    Ok((origin, config))
}

/// The rule file a `RateLimitConfig` stands for, as JSON text.
pub(crate) fn rule_file(config: &RateLimitConfig) -> String {
    let value = json!({
        "domain": config.domain,
        "descriptors": config.descriptors.iter().map(descriptor).collect::<Vec<_>>(),
    });
    value.to_string()
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut out = Map::new();
    out.insert("key".into(), json!(d.key));
    if !d.value.is_empty() {
        out.insert("value".into(), json!(d.value));
    }
    if let Some(policy) = &d.rate_limit {
        out.insert("rate_limit".into(), rate_limit(policy));
    }
    if !d.descriptors.is_empty() {
        let nested: Vec<Value> = d.descriptors.iter().map(descriptor).collect();
        out.insert("descriptors".into(), Value::Array(nested));
    }
    for (name, set) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        ("quota_mode", d.quota_mode),
    ] {
        if set {
            out.insert(name.into(), Value::Bool(true));
        }
    }
    if let Some(metadata) = &d.metadata {
        out.insert("metadata".into(), structure(metadata));
    }
    Value::Object(out)
}

fn rate_limit(p: &RateLimitPolicy) -> Value {
    let mut out = Map::new();
    // UNKNOWN (0) is "no unit", as the reference reads it: right for `unlimited`, and an error
    // naming the missing unit otherwise. A number outside the enum is kept as text, so the
    // loader's error quotes it.
    match RateLimitUnit::try_from(p.unit) {
        Ok(RateLimitUnit::Unknown) => {}
        Ok(unit) => {
            out.insert(
                "unit".into(),
                json!(unit.as_str_name().to_ascii_lowercase()),
            );
        }
        Err(_) => {
            out.insert("unit".into(), json!(format!("unit number {}", p.unit)));
        }
    }
    out.insert("requests_per_unit".into(), json!(p.requests_per_unit));
    if p.unlimited {
        out.insert("unlimited".into(), Value::Bool(true));
    }
    if !p.name.is_empty() {
        out.insert("name".into(), json!(p.name));
    }
    if !p.replaces.is_empty() {
        let replaces: Vec<Value> = p.replaces.iter().map(|r| json!({"name": r.name})).collect();
        out.insert("replaces".into(), Value::Array(replaces));
    }
    Value::Object(out)
}

fn structure(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value(v)))
            .collect(),
    )
}

fn value(v: &prost_types::Value) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number)
        }
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(value).collect()),
        Some(Kind::StructValue(s)) => structure(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::ratelimit::config::ratelimit::v3::RateLimitReplace;

    fn any(config: &RateLimitConfig) -> prost_types::Any {
        prost_types::Any {
            type_url: TYPE_URL.into(),
            value: config.encode_to_vec(),
        }
    }

    fn limited(key: &str, unit: RateLimitUnit, n: u32) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: n,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_config_compiles_as_the_file_it_stands_for() {
        let mut week = limited("user", RateLimitUnit::Week, 7);
        week.rate_limit.as_mut().expect("policy").name = "weekly".into();
        let mut hour = limited("user", RateLimitUnit::Hour, 3);
        hour.value = "vip".into();
        hour.rate_limit.as_mut().expect("policy").replaces = vec![RateLimitReplace {
            name: "weekly".into(),
        }];
        let config = RateLimitConfig {
            name: "one".into(),
            domain: "d".into(),
            descriptors: vec![week, hour],
        };
        let loaded = compile(&[any(&config)], LoadOptions::default()).expect("compiles");
        assert_eq!(loaded.rules.domain_count(), 1);
        assert_eq!(loaded.rules.limits().len(), 2);
    }

    #[test]
    fn errors_name_the_resource_and_the_field_without_a_line() {
        let config = RateLimitConfig {
            name: "broken".into(),
            domain: "d".into(),
            descriptors: vec![limited("user", RateLimitUnit::Unknown, 5)],
        };
        let errors = compile(&[any(&config)], LoadOptions::default()).expect_err("no unit");
        let text = errors.to_string();
        assert!(
            text.starts_with("xDS resource \"broken\": descriptors[0].rate_limit"),
            "{text}"
        );
        assert!(errors.0.iter().all(|e| e.line == 0 && e.column == 0));
    }

    #[test]
    fn a_resource_of_another_type_is_named_by_its_place() {
        let wrong = prost_types::Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            value: Vec::new(),
        };
        let text = compile(&[wrong], LoadOptions::default())
            .expect_err("wrong type")
            .to_string();
        assert!(text.starts_with("xDS resource #0: has type"), "{text}");
    }
}
