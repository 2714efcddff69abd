//! Tracing settings from a map: defaults, the specification's endpoint rules, errors.

use super::*;

fn read(pairs: &[(&str, &str)]) -> Result<Option<TracingSettings>, SettingsError> {
    let env = |k: &str| {
        pairs
            .iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| (*v).to_owned())
    };
    let reader = Reader::new(&env);
    let settings = tracing(&reader);
    match reader.into_problems().as_slice() {
        [] => Ok(settings),
        [one] => Err(one.clone()),
        all => panic!("one problem expected: {all:?}"),
    }
}

fn on(pairs: &[(&str, &str)]) -> TracingSettings {
    let mut all = vec![("TRACING_ENABLED", "true")];
    all.extend_from_slice(pairs);
    read(&all).expect("valid").expect("enabled")
}

#[test]
fn off_unless_enabled_and_the_references_defaults_when_on() {
    assert_eq!(read(&[]), Ok(None));
    let s = on(&[]);
    assert_eq!(s.protocol, OtlpProtocol::Http);
    assert_eq!(s.service_name, "RateLimit");
    assert_eq!(s.sampling_rate, 1.0);
    assert!(!s.include_values);
    assert_eq!(s.endpoint, "http://localhost:4318/v1/traces");
    assert_eq!(s.timeout, Duration::from_secs(10));
    assert_eq!((s.queue_size, s.batch_size), (2048, 128));
    assert_eq!(s.schedule_delay, Duration::from_secs(5));
    let grpc = on(&[("TRACING_EXPORTER_PROTOCOL", "grpc")]);
    assert_eq!(grpc.endpoint, "http://localhost:4317");
}

#[test]
fn endpoints_follow_the_specification() {
    let base = on(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/")]);
    assert_eq!(base.endpoint, "https://collector:4318/v1/traces");
    let signal = on(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "https://traces:1234/custom",
        ),
    ]);
    assert_eq!(signal.endpoint, "https://traces:1234/custom");
    let grpc = on(&[
        ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
    ]);
    assert_eq!(grpc.endpoint, "http://collector:4317");
    let bad = read(&[
        ("TRACING_ENABLED", "true"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
    ]);
    assert_eq!(
        bad.map_err(|e| e.name),
        Err("OTEL_EXPORTER_OTLP_ENDPOINT".into())
    );
}

#[test]
fn headers_timeouts_and_certificates_signal_first() {
    let s = on(&[
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=general"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "Api-Key=s%20ecret, x-tenant=a%2Cb",
        ),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/ca.pem"),
        ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/c.pem"),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem"),
    ]);
    assert_eq!(
        s.headers,
        [
            ("api-key".to_owned(), "s ecret".to_owned()),
            ("x-tenant".to_owned(), "a,b".to_owned())
        ]
    );
    assert_eq!(s.timeout, Duration::from_millis(2500));
    assert_eq!(s.ca_file, Some(PathBuf::from("/ca.pem")));
    assert_eq!(
        s.client_identity,
        Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
    );
}

#[test]
fn bad_values_name_their_variable() {
    for (name, value) in [
        ("TRACING_EXPORTER_PROTOCOL", "zipkin"),
        ("TRACING_SAMPLING_RATE", "often"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "k=%zz"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4096"),
        ("OTEL_BSP_SCHEDULE_DELAY", "0"),
    ] {
        let got = read(&[("TRACING_ENABLED", "true"), (name, value)]);
        assert_eq!(
            got.map_err(|e| e.name),
            Err(name.to_owned()),
            "{name}={value}"
        );
    }
    let key_alone = read(&[
        ("TRACING_ENABLED", "true"),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem"),
    ]);
    assert_eq!(
        key_alone.map_err(|e| e.name),
        Err("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE".to_owned()),
        "the missing half is named"
    );
}
