//! What the server asks of a Kubernetes cluster besides its registry and configuration: the
//! primary cluster's TokenReview (for the certificate API), and each cluster's Secrets and
//! SubjectAccessReview (for gateways' credentials), as the traits of `ca` and `credentials`
//! the server's modules name instead of the adapter.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use wayfinder_config::credentials::Secret;
use wayfinder_kubernetes::access_review::{Access, AccessReviews};
use wayfinder_kubernetes::token_review::{TokenReviews, Verdict};
use wayfinder_registry::{Event, RegistryError};

use crate::ca::{Review, Reviewed, TokenReviewer};
use crate::credentials::SecretStore;

/// The TokenReview of `client`'s cluster, for tokens of one of `audiences`.
pub(super) fn token_reviewer(
    client: &wayfinder_kubernetes::Client,
    audiences: &[String],
) -> Arc<dyn TokenReviewer> {
    let reviews = TokenReviews::new(client.clone(), audiences.to_vec());
    Arc::new(KubernetesTokens(reviews))
}

/// The Secrets of `client`'s cluster `cluster` (of `namespace` only, with `-a`), and its
/// SubjectAccessReview.
pub(super) fn secret_store(
    client: &wayfinder_kubernetes::Client,
    cluster: &str,
    namespace: &Option<String>,
) -> Arc<dyn SecretStore> {
    Arc::new(KubernetesSecrets {
        client: client.clone(),
        cluster: cluster.to_owned(),
        namespace: namespace.clone(),
        reviews: Arc::new(AccessReviews::new(client.clone())),
    })
}

/// One cluster's Secrets and SubjectAccessReview, for gateways' credentials.
struct KubernetesSecrets {
    client: wayfinder_kubernetes::Client,
    cluster: String,
    /// `-a NAMESPACE`: only its Secrets are read.
    namespace: Option<String>,
    reviews: Arc<AccessReviews>,
}

impl SecretStore for KubernetesSecrets {
    fn watch(&self) -> BoxStream<'static, Result<Event<Secret>, RegistryError>> {
        wayfinder_kubernetes::secrets::watch(
            self.client.clone(),
            &self.cluster,
            self.namespace.clone(),
        )
    }

    fn may_read(
        &self,
        namespace: &str,
        service_account: &str,
    ) -> BoxFuture<'static, Result<Result<(), String>, String>> {
        let reviews = self.reviews.clone();
        let (namespace, service_account) = (namespace.to_owned(), service_account.to_owned());
        Box::pin(async move {
            match reviews.may_list_secrets(&namespace, &service_account).await {
                Ok(Access::Allowed) => Ok(Ok(())),
                Ok(Access::Denied(why)) => Ok(Err(why)),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}

/// The primary cluster's TokenReview, for the certificate API.
#[derive(Debug)]
struct KubernetesTokens(TokenReviews);

impl TokenReviewer for KubernetesTokens {
    fn review<'a>(&'a self, token: &'a str) -> Review<'a> {
        Box::pin(async move {
            match self.0.review(token).await {
                Ok(Verdict::ServiceAccount { namespace, name }) => {
                    Ok(Reviewed::ServiceAccount(namespace, name))
                }
                Ok(Verdict::Refused(why)) => Ok(Reviewed::Refused(why)),
                Err(err) => Err(err.to_string()),
            }
        })
    }
}
