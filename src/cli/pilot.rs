//! pilot-discovery's flags that wayfinder does not take, refused by name with what to use
//! instead, before clap would refuse them as unknown (and suggest a flag that happens to be
//! spelled alike: `--meshConfig` once drew "did you mean `--kubeconfig`?").
//!
//! The list is pilot-discovery's `discovery` flags (`pilot/cmd/pilot-discovery/app/cmd.go`,
//! with Istio's logging, ControlZ and keepalive options) less those wayfinder accepts under
//! their Istio spelling; `--cfConfig` is older pilot-discovery's Cloud Foundry flag, which
//! seeds still carry.

use std::ffi::OsString;

/// Each unsupported flag (without its dashes) and what to do instead.
const UNSUPPORTED: [(&str, &str); 23] = [
    (
        "namespace",
        "wayfinder does not need its own namespace; the mesh's policies are read from \
         `--root-namespace` (or MeshConfig's `rootNamespace`)",
    ),
    (
        "n",
        "wayfinder does not need its own namespace; the mesh's policies are read from \
         `--root-namespace` (or MeshConfig's `rootNamespace`)",
    ),
    (
        "plugins",
        "there are no networking plugins: authentication and authorization policies are \
         built in",
    ),
    (
        "shutdownDuration",
        "the shutdown is not configurable: on SIGTERM wayfinder closes its listeners and \
         streams, and proxies reconnect to another replica",
    ),
    (
        "clusterRegistriesNamespace",
        "remote clusters are not read from Secrets: name each with `--kubeconfig NAME=PATH`",
    ),
    (
        "clusterAliases",
        "name each cluster with `--kubeconfig NAME=PATH`",
    ),
    (
        "resync",
        "watches have no resync period: a watch that ends lists again and keeps the last good \
         state meanwhile",
    ),
    (
        "httpsAddr",
        "there are no injection or validation webhooks; check files with `wayfinder validate`",
    ),
    (
        "profile",
        "there is no pprof endpoint; `/metrics` serves `process_*`",
    ),
    (
        "caCertFile",
        "the secure port's certificate comes from the mesh CA: `--cacerts-dir` (plug-in CA) or \
         `--ca-dir`, with `--secure-grpc-san` for its names",
    ),
    (
        "tlsCertFile",
        "the secure port's certificate comes from the mesh CA: `--cacerts-dir` (plug-in CA) or \
         `--ca-dir`, with `--secure-grpc-san` for its names",
    ),
    (
        "tlsKeyFile",
        "the secure port's key is made by the mesh CA and never read from a file",
    ),
    (
        "tls-cipher-suites",
        "the secure port offers rustls's default suites (TLS 1.3 and TLS 1.2 AEAD only)",
    ),
    (
        "kubernetesApiQPS",
        "wayfinder holds one watch per kind and cluster instead of polling the API server",
    ),
    (
        "kubernetesApiBurst",
        "wayfinder holds one watch per kind and cluster instead of polling the API server",
    ),
    (
        "ctrlz_port",
        "there is no ControlZ: `/debug/*` on `--http-addr` and `/metrics` on \
         `--monitoring-addr` show the server's state",
    ),
    (
        "ctrlz_address",
        "there is no ControlZ: `/debug/*` on `--http-addr` and `/metrics` on \
         `--monitoring-addr` show the server's state",
    ),
    (
        "log_target",
        "logs go to standard error (`--log-format json` for JSON lines)",
    ),
    (
        "log_rotate",
        "logs go to standard error; rotate them where they are collected",
    ),
    (
        "log_caller",
        "log lines name their module (`target`), not their source line",
    ),
    (
        "log_stacktrace_level",
        "log lines carry no stack traces; errors name their source",
    ),
    (
        "vklog",
        "the Kubernetes client's logs follow `--log-level` (scope `kube`)",
    ),
    (
        "cfConfig",
        "Cloud Foundry is not a registry: `--registries` takes Mock, File, Consul, Eureka and \
         Kubernetes",
    ),
];

/// `Err` with the message for the first unsupported pilot-discovery flag among the
/// arguments of `wayfinder discovery` (`args` as the process got them, program name first).
pub fn refuse_unsupported(args: impl IntoIterator<Item = OsString>) -> Result<(), String> {
    let mut args = args.into_iter().skip(1);
    if args.next().is_none_or(|command| command != "discovery") {
        return Ok(());
    }
    for arg in args {
        let Some(arg) = arg.to_str() else { continue };
        if arg == "--" {
            break;
        }
        let name = match arg.strip_prefix("--") {
            Some(long) => long,
            // Short flags: only `-n`, pilot-discovery's `--namespace`.
            None => match arg.strip_prefix('-') {
                Some(short) if short == "n" || short.starts_with("n=") => short,
                _ => continue,
            },
        };
        let name = name.split_once('=').map_or(name, |(n, _)| n);
        // `--log_rotate` comes with `_max_age`, `_max_backups` and `_max_size`.
        let known = UNSUPPORTED.iter().find(|(flag, _)| {
            *flag == name || (*flag == "log_rotate" && name.starts_with("log_rotate_"))
        });
        if let Some((flag, why)) = known {
            let dashes = if flag.len() == 1 { "-" } else { "--" };
            return Err(format!(
                "pilot-discovery's `{dashes}{name}` is not supported: {why}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &[&str]) -> Result<(), String> {
        refuse_unsupported(args.iter().map(OsString::from))
    }

    #[test]
    fn an_unsupported_flag_is_named_with_what_to_use_instead() {
        let e = check(&["wayfinder", "discovery", "--grpcAddr", ":0", "--plugins=x"]).unwrap_err();
        assert!(
            e.starts_with("pilot-discovery's `--plugins` is not supported: there are no"),
            "{e}"
        );
        let e = check(&["wayfinder", "discovery", "-n", "istio-system"]).unwrap_err();
        assert!(e.contains("`-n`") && e.contains("--root-namespace"), "{e}");
        let e = check(&["wayfinder", "discovery", "--log_rotate_max_age", "3"]).unwrap_err();
        assert!(e.contains("`--log_rotate_max_age`"), "{e}");
    }

    #[test]
    fn supported_flags_values_and_other_commands_pass() {
        for args in [
            &[
                "wayfinder",
                "discovery",
                "--meshConfig",
                "mesh",
                "--networksConfig",
                "networks",
                "--clusterID",
                "c",
            ][..],
            // A value that looks like a flag is a value only after `--`.
            &["wayfinder", "discovery", "--", "--profile"],
            &["wayfinder", "validate", "--profile"],
            &["wayfinder"],
        ] {
            assert_eq!(check(args), Ok(()), "{args:?}");
        }
    }
}
