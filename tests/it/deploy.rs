//! The deployment material is checked, not just shipped: Kubernetes manifests against the
//! Kubernetes schemas in strict mode (offline, `kubernetes-validate`), the kustomization lists
//! every manifest, the ConfigMap's rule files equal `config/` and pass `check-config`, and every
//! Envoy configuration (the bootstrap and the Envoy payloads inside the Istio patches) is
//! accepted by a real Envoy in validate mode. Each check is shown to fail on a broken copy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::temp_dir;
use crate::support::envoy::envoy;
use crate::support::{missing, peers_venv};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn kube_dir() -> PathBuf {
    root().join("deploy/kubernetes")
}

fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(kube_dir())
        .expect("deploy/kubernetes")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml")
        })
        .collect();
    files.sort();
    files
}

/// The Envoy binary of `scripts/test.sh`'s `.venv-envoy`, if installed.
fn kube_validate(files: &[PathBuf], version: &str) -> Option<(bool, String)> {
    let venv = peers_venv()?;
    let out = Command::new(venv.join("bin/kubernetes-validate"))
        .args(["--strict", "--quiet", "-k", version])
        .args(files)
        .output()
        .expect("kubernetes-validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success() && !text.contains("ERROR"), text))
}

#[test]
fn kubernetes_manifests_pass_strict_schema_validation() {
    if peers_venv().is_none() {
        missing("kubernetes-validate (the peer virtualenv)");
        return;
    }
    for version in ["1.30.0", "1.37.0"] {
        let (ok, report) = kube_validate(&manifests(), version).expect("venv");
        assert!(ok, "Kubernetes {version}:\n{report}");
    }
    // Strict mode catches a misspelled key.
    let dir = temp_dir("kube");
    let broken = dir.join("deployment.yaml");
    let text = std::fs::read_to_string(kube_dir().join("deployment.yaml")).expect("read");
    std::fs::write(&broken, text.replace("readinessProbe:", "readinesProbe:")).expect("write");
    let (ok, report) = kube_validate(&[broken], "1.37.0").expect("venv");
    assert!(!ok, "a misspelled key must fail:\n{report}");
}

#[test]
fn kustomization_lists_every_manifest() {
    let text = std::fs::read_to_string(kube_dir().join("kustomization.yaml")).expect("read");
    let mut listed: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter(|l| l.ends_with(".yaml"))
        .map(str::to_owned)
        .collect();
    listed.sort();
    let present: Vec<String> = manifests()
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, present);
    // Where kubectl is installed, the base renders.
    if let Ok(out) = Command::new("kubectl")
        .args(["kustomize"])
        .arg(kube_dir())
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rendered = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            rendered.matches("\nkind: ").count() + usize::from(rendered.starts_with("kind: ")),
            12,
            "{rendered}"
        );
    }
}

#[derive(serde::Deserialize)]
struct ConfigMap {
    data: BTreeMap<String, String>,
}

#[test]
fn configmap_rules_equal_config_dir_and_pass_check_config() {
    let text = std::fs::read_to_string(kube_dir().join("configmap.yaml")).expect("read");
    let cm: ConfigMap = serde_saphyr::from_str(&text).expect("configmap parses");
    let dir = temp_dir("cm");
    let mut names = Vec::new();
    for (name, rules) in &cm.data {
        let shipped = std::fs::read_to_string(root().join("config").join(name))
            .unwrap_or_else(|_| panic!("config/{name}"));
        assert_eq!(
            rules.trim_end(),
            shipped.trim_end(),
            "{name} differs from config/{name}"
        );
        std::fs::write(dir.join(name), rules).expect("write");
        names.push(name.clone());
    }
    let in_config = std::fs::read_dir(root().join("config"))
        .expect("config")
        .count();
    assert_eq!(
        names.len(),
        in_config,
        "every file of config/ is in the ConfigMap"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .arg("check-config")
        .arg(&dir)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "all rate limit configs ok"
    );
}

fn envoy_check(envoy: &Path, mode: &str, file: &Path) -> (bool, String) {
    let venv = peers_venv().expect("peer virtualenv");
    let out = Command::new(venv.join("bin/python"))
        .arg(root().join("tests/peers/envoy_check.py"))
        .args([mode, envoy.to_str().expect("path")])
        .arg(file)
        .output()
        .expect("python");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn envoy_and_istio_configs_validate_with_a_real_envoy() {
    let Some(envoy) = envoy() else { return };
    if peers_venv().is_none() {
        missing("the peer virtualenv");
        return;
    }
    let bootstrap = root().join("deploy/envoy/envoy.yaml");
    let istio = root().join("deploy/istio/envoyfilter.yaml");
    let (ok, report) = envoy_check(&envoy, "bootstrap", &bootstrap);
    assert!(ok, "{report}");
    for file in ["algorithms.yaml", "token-budget.yaml"] {
        let (ok, report) =
            envoy_check(&envoy, "bootstrap", &root().join("deploy/envoy").join(file));
        assert!(ok, "{file}: {report}");
    }
    let (ok, report) = envoy_check(&envoy, "envoyfilter", &istio);
    assert!(ok, "{report}");
    // RLQS: the bootstrap and the Istio patch, and a misspelled bucket setting is refused.
    let rlqs = root().join("deploy/envoy/rlqs.yaml");
    let rlqs_istio = root().join("deploy/istio/rlqs-envoyfilter.yaml");
    let (ok, report) = envoy_check(&envoy, "bootstrap", &rlqs);
    assert!(ok, "{report}");
    let (ok, report) = envoy_check(&envoy, "envoyfilter", &rlqs_istio);
    assert!(ok, "{report}");
    let broken = temp_dir("envoy").join("rlqs.yaml");
    let text = std::fs::read_to_string(&rlqs).expect("read");
    std::fs::write(
        &broken,
        text.replace("reporting_interval:", "reporting_intervall:"),
    )
    .expect("write");
    let (ok, report) = envoy_check(&envoy, "bootstrap", &broken);
    assert!(!ok, "a misspelled RLQS field must fail:\n{report}");
    // Both checks reject a misspelled field inside the ratelimit filter's typed_config.
    let dir = temp_dir("envoy");
    for (mode, file) in [("bootstrap", &bootstrap), ("envoyfilter", &istio)] {
        let text = std::fs::read_to_string(file).expect("read");
        let broken = dir.join(format!("{mode}.yaml"));
        std::fs::write(
            &broken,
            text.replace("failure_mode_deny: true", "failure_mode_denyy: true"),
        )
        .expect("write");
        let (ok, report) = envoy_check(&envoy, mode, &broken);
        assert!(!ok, "{mode}: a misspelled field must fail:\n{report}");
    }
}

/// The Redis/Valkey overlay: its own manifests pass strict schema validation, the settings it
/// gives Turnstile are accepted and name the Valkey Service, and (where kubectl is installed)
/// it renders without any memcached workload.
#[test]
fn redis_overlay_validates_and_its_settings_load() {
    let dir = root().join("deploy/overlays/redis");
    if peers_venv().is_some() {
        for version in ["1.30.0", "1.37.0"] {
            let (ok, report) = kube_validate(&[dir.join("valkey.yaml")], version).expect("venv");
            assert!(ok, "Kubernetes {version}:\n{report}");
        }
    } else {
        missing("kubernetes-validate (the peer virtualenv)");
    }
    #[derive(serde::Deserialize)]
    struct Env {
        name: String,
        value: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Container {
        env: Vec<Env>,
    }
    #[derive(serde::Deserialize)]
    struct PodSpec {
        containers: Vec<Container>,
    }
    #[derive(serde::Deserialize)]
    struct Template {
        spec: PodSpec,
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        template: Template,
    }
    #[derive(serde::Deserialize)]
    struct Deployment {
        spec: Spec,
    }
    let text = std::fs::read_to_string(dir.join("deployment-redis.yaml")).expect("patch");
    let patch: Deployment = serde_saphyr::from_str(&text).expect("patch parses");
    let env: BTreeMap<String, String> = patch.spec.template.spec.containers[0]
        .env
        .iter()
        .filter_map(|e| e.value.clone().map(|v| (e.name.clone(), v)))
        .collect();
    let settings = turnstile::settings::Settings::from_env(&|k| env.get(k).cloned(), None)
        .expect("the overlay's settings load");
    let turnstile::settings::Backend::Redis(redis) = settings.backend else {
        panic!("the overlay selects Redis");
    };
    assert_eq!(
        redis.target,
        turnstile::settings::RedisTarget::Tcp("valkey.turnstile.svc.cluster.local:6379".into())
    );
    if let Ok(out) = Command::new("kubectl").arg("kustomize").arg(&dir).output() {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rendered = String::from_utf8_lossy(&out.stdout);
        assert!(rendered.contains("name: valkey") && rendered.contains("value: redis"));
        assert!(
            !rendered.contains("\n  name: memcached\n"),
            "no memcached object remains"
        );
        assert!(
            !rendered.contains("MEMCACHE_SRV"),
            "no memcached setting remains"
        );
    }
}
