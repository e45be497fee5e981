//! Service-account tokens checked by the API server (`TokenReview`), as istiod's CA checks
//! the token istio-agent presents for a pod's first certificate.
//!
//! A token is accepted when the API server says it is authenticated for one of the
//! audiences asked (`istio-ca` by default, the audience of the projected token Istio mounts
//! at `/var/run/secrets/tokens/istio-token`) and its user is a service account,
//! `system:serviceaccount:NAMESPACE:NAME`. Each check is one `POST` to
//! `/apis/authentication.k8s.io/v1/tokenreviews`: the server needs `create` on
//! `tokenreviews` (cluster-wide), as istiod's ClusterRole has.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};

/// What the API server said of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A service account's token: its namespace and name.
    ServiceAccount {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Not accepted, and why (the API server's words where it gave some).
    Refused(String),
}

/// Reviews tokens against one cluster's API server.
#[derive(Clone)]
pub struct TokenReviews {
    client: kube::Client,
    audiences: Vec<String>,
}

impl std::fmt::Debug for TokenReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviews")
            .field("audiences", &self.audiences)
            .finish_non_exhaustive()
    }
}

impl TokenReviews {
    /// Reviews through `client`, asking for `audiences` (empty: the API server's own).
    pub fn new(client: kube::Client, audiences: Vec<String>) -> Self {
        Self { client, audiences }
    }

    /// Asks the API server about `token`. `Err` when it could not answer.
    pub async fn review(&self, token: &str) -> Result<Verdict, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            let why = status
                .error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "the API server did not authenticate the token".into());
            return Ok(Verdict::Refused(why));
        }
        let username = status.user.and_then(|u| u.username).unwrap_or_default();
        let account = username
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'));
        Ok(match account {
            Some((namespace, name)) => Verdict::ServiceAccount {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
            None => Verdict::Refused(format!("{username:?} is not a service account")),
        })
    }
}
