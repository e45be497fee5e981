//! HTTP rules: actions, destinations, matches, redirects, rewrites, retries, faults, mirrors,
//! CORS and header changes. Each case is one rule of a VirtualService for host `r`.

use super::{assert_errors, validate, vs};

/// Asserts that the rule, written in flow style, has exactly the errors listed (paths below
/// `spec.http[0]`).
#[track_caller]
fn assert_rule(cases: &[(&str, &[&str])]) {
    for (rule, expected) in cases {
        let yaml = format!("{{hosts: [r], http: [{rule}]}}");
        let expected: Vec<String> = expected
            .iter()
            .map(|f| format!("spec.http[0]{f}"))
            .collect();
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        assert_errors(vs, &[(yaml.as_str(), &expected)]);
    }
}

const ROUTE: &str = "route: [{destination: {host: r}}]";

#[test]
fn a_rule_does_exactly_one_thing() {
    assert_rule(&[
        ("{name: nothing}", &[""]),
        (&format!("{{{ROUTE}, redirect: {{uri: /x}}}}"), &[""]),
        ("{delegate: {name: other}}", &[]),
        ("{delegate: {name: Other}}", &[".delegate.name"]),
        (&format!("{{{ROUTE}, delegate: {{name: other}}}}"), &[""]),
        ("{redirect: {uri: /x}, rewrite: {uri: /y}}", &[".rewrite"]),
        (
            "{directResponse: {status: 503}, fault: {abort: {httpStatus: 500}}}",
            &[".fault"],
        ),
        (
            "{directResponse: {status: 503, body: {string: unavailable}}}",
            &[],
        ),
    ]);
}

#[test]
fn destinations_and_weights() {
    assert_rule(&[
        (
            "{route: [{destination: {host: ''}}]}",
            &[".route[0].destination.host"],
        ),
        (
            "{route: [{destination: {host: r, subset: v_1, port: {number: 0}}}]}",
            &[
                ".route[0].destination.subset",
                ".route[0].destination.port.number",
            ],
        ),
        (
            "{route: [{destination: {host: r}, weight: 150}]}",
            &[".route[0].weight"],
        ),
        (
            "{route: [{destination: {host: a}}, {destination: {host: b}, weight: 0}]}",
            &[".route"],
        ),
        (
            "{route: [{destination: {host: a}, weight: 90}, {destination: {host: b}, weight: 10}]}",
            &[],
        ),
    ]);
}

#[test]
fn matches() {
    let m = |conditions: &str| format!("{{match: [{conditions}], {ROUTE}}}");
    assert_rule(&[
        (&m("{uri: {regex: '('}}"), &[".match[0].uri.regex"]),
        (&m("{uri: {regex: '/(?=api)'}}"), &[".match[0].uri.regex"]),
        (&m("{uri: {prefix: ''}, method: {exact: GET}}"), &[]),
        (&m("{uri: {exact: ''}}"), &[".match[0].uri.exact"]),
        (
            &m("{method: {prefix: ''}, scheme: {regex: ''}}"),
            &[".match[0].scheme.regex", ".match[0].method.prefix"],
        ),
        (
            &m("{authority: {regex: 'a{2000}'}}"),
            &[".match[0].authority.regex"],
        ),
        (
            &m("{headers: {X-User: {exact: a}}}"),
            &[".match[0].headers.X-User"],
        ),
        (
            &m("{headers: {x-user: {exact: a, prefix: b}}}"),
            &[".match[0].headers.x-user"],
        ),
        (
            &m("{headers: {'': {exact: a}}}"),
            &[".match[0].headers[\"\"]"],
        ),
        (
            &m("{headers: {x-user: {}, ':authority': {exact: ''}, x-id: {prefix: ''}}}"),
            &[".match[0].headers.x-id.prefix"],
        ),
        (
            &m("{headers: {'@request.auth.claims.group': {exact: a}}}"),
            &[".match[0].headers[\"@request.auth.claims.group\"]"],
        ),
        (
            &m("{queryParams: {q: {regex: '[a'}, '': {}}}"),
            &[
                ".match[0].queryParams[\"\"]",
                ".match[0].queryParams.q.regex",
            ],
        ),
        (
            &m("{withoutHeaders: {x-debug: {regex: '*'}, x-test: {}}}"),
            &[".match[0].withoutHeaders.x-debug.regex"],
        ),
        (
            &m("{port: 0, gateways: ['a/b/c']}"),
            &[".match[0].port", ".match[0].gateways[0]"],
        ),
    ]);
}

#[test]
fn redirects_rewrites_and_direct_responses() {
    assert_rule(&[
        ("{redirect: {}}", &[".redirect"]),
        (
            "{redirect: {uri: /x, redirectCode: 305}}",
            &[".redirect.redirectCode"],
        ),
        (
            "{redirect: {derivePort: FROM_SOMEWHERE}}",
            &[".redirect.derivePort"],
        ),
        (
            "{redirect: {port: 8443, derivePort: FROM_REQUEST_PORT}}",
            &[".redirect.derivePort"],
        ),
        (
            "{redirect: {scheme: ftp, port: 0}}",
            &[".redirect.port", ".redirect.scheme"],
        ),
        (
            "{redirect: {authority: a.example.com, derivePort: FROM_PROTOCOL_DEFAULT, redirectCode: 308}}",
            &[],
        ),
        (&format!("{{{ROUTE}, rewrite: {{}}}}"), &[".rewrite"]),
        (
            &format!("{{{ROUTE}, rewrite: {{uriRegexRewrite: {{match: '(', rewrite: x}}}}}}"),
            &[".rewrite.uriRegexRewrite.match"],
        ),
        (
            &format!(
                "{{{ROUTE}, rewrite: {{uri: /v2, uriRegexRewrite: {{match: '^/v1', rewrite: ''}}}}}}"
            ),
            &[
                ".rewrite.uriRegexRewrite",
                ".rewrite.uriRegexRewrite.rewrite",
            ],
        ),
        (
            &format!(
                "{{{ROUTE}, rewrite: {{authority: a}}, headers: {{request: {{set: {{host: b}}}}}}}}"
            ),
            &[".rewrite.authority"],
        ),
        (
            "{directResponse: {status: 100}}",
            &[".directResponse.status"],
        ),
        (
            "{directResponse: {status: 200, body: {string: a, bytes: YQ==}}}",
            &[".directResponse.body"],
        ),
        (
            "{directResponse: {status: 200, body: {bytes: 'not base64!'}}}",
            &[".directResponse.body.bytes"],
        ),
    ]);
}

#[test]
fn timeouts_and_retries() {
    assert_rule(&[
        (&format!("{{{ROUTE}, timeout: 0s}}"), &[".timeout"]),
        (&format!("{{{ROUTE}, timeout: 500us}}"), &[".timeout"]),
        (
            &format!(
                "{{{ROUTE}, timeout: 10s, retries: {{attempts: 3, perTryTimeout: 2s, retryOn: '5xx, connect-failure,503,unavailable'}}}}"
            ),
            &[],
        ),
        (
            &format!("{{{ROUTE}, retries: {{attempts: 3, perTryTimeout: 0s}}}}"),
            &[".retries.perTryTimeout"],
        ),
        (
            &format!("{{{ROUTE}, retries: {{attempts: -1}}}}"),
            &[".retries.attempts"],
        ),
        (
            &format!("{{{ROUTE}, retries: {{retryOn: 5xx}}}}"),
            &[".retries.attempts"],
        ),
        (
            &format!("{{{ROUTE}, retries: {{attempts: 2, retryOn: '5xx,bogus,600'}}}}"),
            &[".retries.retryOn", ".retries.retryOn"],
        ),
    ]);
}

#[test]
fn faults() {
    let f = |fault: &str| format!("{{{ROUTE}, fault: {fault}}}");
    assert_rule(&[
        (&f("{}"), &[".fault"]),
        (
            &f(
                "{delay: {fixedDelay: 5s, percentage: {value: 10}}, abort: {grpcStatus: UNAVAILABLE}}",
            ),
            &[],
        ),
        (
            &f("{delay: {exponentialDelay: 1s}}"),
            &[".fault.delay.exponentialDelay"],
        ),
        (
            &f("{delay: {percentage: {value: 10}}}"),
            &[".fault.delay.fixedDelay"],
        ),
        (
            &f("{delay: {fixedDelay: 1s, percentage: {value: 150}}}"),
            &[".fault.delay.percentage.value"],
        ),
        (
            &f("{delay: {fixedDelay: 1s, percentage: {value: 0.00001}}}"),
            &[".fault.delay.percentage.value"],
        ),
        (
            &f("{delay: {fixedDelay: 1s, percent: 50, percentage: {value: 50}}}"),
            &[".fault.delay.percent"],
        ),
        (
            &f("{delay: {fixedDelay: 1s, percent: 200}}"),
            &[".fault.delay.percent"],
        ),
        (
            &f("{abort: {httpStatus: 500, grpcStatus: INTERNAL}}"),
            &[".fault.abort"],
        ),
        (&f("{abort: {percentage: {value: 1}}}"), &[".fault.abort"]),
        (
            &f("{abort: {httpStatus: 700}}"),
            &[".fault.abort.httpStatus"],
        ),
        (
            &f("{abort: {grpcStatus: BROKEN}}"),
            &[".fault.abort.grpcStatus"],
        ),
        (
            &f("{abort: {http2Error: REFUSED_STREAM}}"),
            &[".fault.abort.http2Error"],
        ),
    ]);
}

#[test]
fn mirrors_cors_and_headers() {
    assert_rule(&[
        (
            &format!("{{{ROUTE}, mirror: {{host: ''}}}}"),
            &[".mirror.host"],
        ),
        (
            &format!("{{{ROUTE}, mirror: {{host: m}}, mirrorPercentage: {{value: 101}}}}"),
            &[".mirrorPercentage.value"],
        ),
        (
            &format!(
                "{{{ROUTE}, mirror: {{host: m}}, mirrorPercent: 5, mirrorPercentage: {{value: 5}}}}"
            ),
            &[".mirrorPercent"],
        ),
        (
            &format!("{{{ROUTE}, mirror: {{host: m}}, mirrors: [{{destination: {{host: n}}}}]}}"),
            &[".mirrors"],
        ),
        (
            &format!(
                "{{{ROUTE}, corsPolicy: {{allowOrigins: [{{exact: ''}}, {{regex: '[z-a]'}}, {{prefix: https://}}]}}}}"
            ),
            &[
                ".corsPolicy.allowOrigins[0].exact",
                ".corsPolicy.allowOrigins[1].regex",
            ],
        ),
        (
            &format!(
                "{{{ROUTE}, corsPolicy: {{maxAge: 500ms, allowMethods: [GET, get], allowHeaders: ['bad header']}}}}"
            ),
            &[
                ".corsPolicy.allowMethods[1]",
                ".corsPolicy.allowHeaders[0]",
                ".corsPolicy.maxAge",
            ],
        ),
        (
            &format!(
                "{{{ROUTE}, corsPolicy: {{maxAge: 24h, allowMethods: ['*'], exposeHeaders: [x-id], unmatchedPreflights: IGNORE}}}}"
            ),
            &[],
        ),
        (
            &format!(
                "{{{ROUTE}, headers: {{request: {{set: {{'': v, x-a: \"a\\nb\"}}, remove: [':path']}}, response: {{add: {{host: h}}}}}}}}"
            ),
            &[
                ".headers.request.set[\"\"]",
                ".headers.request.set.x-a",
                ".headers.request.remove[0]",
                ".headers.response.add.host",
            ],
        ),
        (
            "{route: [{destination: {host: r}, headers: {request: {add: {':authority': a}}, response: {remove: ['']}}}]}",
            &[".route[0].headers.response.remove[0]"],
        ),
    ]);
}

#[test]
fn messages_say_what_is_expected() {
    let o = vs(
        "{hosts: [r], http: [{route: [{destination: {host: r}}], retries: {attempts: 1, retryOn: nope}}]}",
    );
    let problems = validate(&o);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0]
            .message
            .contains("\"nope\" is not a retry condition")
    );
    assert!(problems[0].message.contains("gateway-error"));
}
