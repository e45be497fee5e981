//! The registry kinds' names and features, and a build without some registry.

use super::*;

#[test]
fn names_are_case_insensitive_and_unknown_ones_are_explained() {
    assert_eq!("mock".parse::<Kind>(), Ok(Kind::Mock));
    assert_eq!(" FILE".parse::<Kind>(), Ok(Kind::File));
    let err = "Zookeeper".parse::<Kind>().unwrap_err();
    assert!(
        err.contains("unknown registry \"Zookeeper\"")
            && err.contains("Mock, File, Consul, Eureka, Kubernetes"),
        "{err}"
    );
    assert_eq!("consul".parse::<Kind>(), Ok(Kind::Consul));
    assert_eq!("kubernetes".parse::<Kind>(), Ok(Kind::Kubernetes));
}

#[test]
fn each_heavy_registry_is_compiled_with_its_feature() {
    assert!(Kind::Mock.compiled() && Kind::File.compiled());
    assert_eq!(Kind::Consul.compiled(), cfg!(feature = "consul"));
    assert_eq!(Kind::Eureka.compiled(), cfg!(feature = "eureka"));
    assert_eq!(Kind::Kubernetes.compiled(), cfg!(feature = "kubernetes"));
}

/// Only in a build without some registry (`cargo test --no-default-features`).
#[cfg(not(all(feature = "kubernetes", feature = "consul", feature = "eureka")))]
#[tokio::test]
#[allow(
    clippy::needless_update,
    reason = "Kubernetes has more fields in a build with the Kubernetes registry"
)]
async fn a_registry_left_out_of_the_build_is_refused_before_anything_starts() {
    let config = |kinds: Vec<Kind>, config_source: bool| Config {
        kinds,
        file_paths: Vec::new(),
        config_dirs: Vec::new(),
        max_file_bytes: wayfinder_file::DEFAULT_MAX_FILE_BYTES,
        domain: "cluster.local".into(),
        #[cfg(feature = "consul")]
        consul: wayfinder_consul::Config::default(),
        #[cfg(feature = "eureka")]
        eureka: wayfinder_eureka::Config::default(),
        kubernetes: Kubernetes {
            config_source,
            ..Kubernetes::default()
        },
    };
    let refused = async |config: Config| match build(&config).await {
        Ok(_) => panic!("{:?} should be refused", config.kinds),
        Err(err) => err.to_string(),
    };
    for kind in Kind::ALL.into_iter().filter(|k| !k.compiled()) {
        let feature = kind.feature().unwrap();
        assert_eq!(
            refused(config(vec![Kind::Mock, kind], false)).await,
            format!(
                "registry {kind} is not compiled into this build; rebuild with the cargo \
                 feature `{feature}`"
            )
        );
    }
    if !Kind::Kubernetes.compiled() {
        assert_eq!(
            refused(config(vec![Kind::Mock], true)).await,
            "the Kubernetes config source (--config-source k8s) is not compiled into this \
             build; rebuild with the cargo feature `kubernetes`"
        );
    }
}
