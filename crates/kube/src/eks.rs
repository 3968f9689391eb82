//! EKS bearer tokens, minted natively as Argo CD's `argocd-k8s-auth aws` and `aws eks get-token`
//! mint them: `k8s-aws-v1.` and the base64url (unpadded) of a presigned STS
//! `GetCallerIdentity` URL, signed with SigV4 (aws-sigv4) over the headers `host` and
//! `x-k8s-aws-id: <cluster name>`, which EKS's authenticator accepts for 15 minutes. The
//! credentials are the controller's own, from the AWS SDK's standard chain (environment, shared
//! profile, web identity as EKS service accounts get it, ECS and EC2 roles), after an
//! `AssumeRole` when the Secret names `roleARN`. [`EksTokens`] keeps a spoke's token and mints
//! the next a minute before it expires; its [`EksLayer`] in the spoke client's stack puts a live
//! token on every request.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::BehaviorVersion;
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use std::task::{Context, Poll};

use futures::TryFutureExt;
use futures::future::BoxFuture;
use http::Request;
use serde::Deserialize;
use tower::BoxError;

/// The prefix of an EKS token.
pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// The header naming the cluster inside the signature.
const CLUSTER_HEADER: &str = "x-k8s-aws-id";
/// How long a token is reported valid, as both Argo CD and aws-iam-authenticator report it
/// (EKS accepts it for 15 minutes from its signing time).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(14 * 60);
/// A token is minted again when less than this remains of it.
pub const RENEW_BEFORE: Duration = Duration::from_secs(60);

/// Argo CD's `awsAuthConfig` of a cluster Secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AwsAuth {
    /// The EKS cluster's name (signed into the token; EKS refuses a token of another cluster).
    pub cluster_name: String,
    /// A role to assume with the controller's credentials first (Argo CD's `roleARN`).
    #[serde(default, rename = "roleARN")]
    pub role_arn: Option<String>,
    /// A profile of the controller's shared AWS config to take the credentials from.
    #[serde(default)]
    pub profile: Option<String>,
}

/// Why no token could be minted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EksError {
    /// No region in the environment nor the profile.
    #[error(
        "no AWS region for EKS cluster {cluster:?}: set AWS_REGION (or the profile's region) in the controller's environment"
    )]
    NoRegion {
        /// The EKS cluster's name.
        cluster: String,
    },
    /// The credential chain found nothing or failed.
    #[error("cannot get AWS credentials for EKS cluster {cluster:?}: {message}")]
    Credentials {
        /// The EKS cluster's name.
        cluster: String,
        /// The chain's error, with its causes.
        message: String,
    },
    /// The signer refused its input.
    #[error("cannot sign the EKS token of cluster {cluster:?}: {message}")]
    Sign {
        /// The EKS cluster's name.
        cluster: String,
        /// The signer's error.
        message: String,
    },
}

/// A minted token and when it stops being used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// `k8s-aws-v1.…`
    pub value: String,
    /// The signing time + [`TOKEN_LIFETIME`], or the credentials' expiry when sooner.
    pub expires: SystemTime,
}

/// The token of `cluster` in `region` signed by `credentials` at `at`: no I/O.
pub fn mint(
    credentials: &Credentials,
    region: &str,
    cluster: &str,
    at: SystemTime,
) -> Result<Token, EksError> {
    let failed = |message: String| EksError::Sign {
        cluster: cluster.to_owned(),
        message,
    };
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    // EKS ignores it (the URL is valid 15 minutes from X-Amz-Date); the SDKs send 60.
    settings.expires_in = Some(Duration::from_secs(60));
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(at)
        .settings(settings)
        .build()
        .map_err(|e| failed(e.to_string()))?
        .into();
    // The regional endpoint, as Argo CD (3.4 and later) and aws-iam-authenticator use; China's
    // regions are in their own partition.
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    let url = format!("https://sts.{region}.{domain}/?Action=GetCallerIdentity&Version=2011-06-15");
    let signable = SignableRequest::new(
        "GET",
        url.as_str(),
        [(CLUSTER_HEADER, cluster)].into_iter(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| failed(e.to_string()))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| failed(e.to_string()))?
        .into_parts();
    let mut request = Request::get(url.as_str())
        .body(())
        .map_err(|e| failed(e.to_string()))?;
    instructions.apply_to_request_http1x(&mut request);
    use base64::Engine;
    let encoded =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(request.uri().to_string());
    // Temporary credentials that expire sooner (an instance role's) end the token with them.
    let expires = match credentials.expiry() {
        Some(end) if end < at + TOKEN_LIFETIME => end,
        _ => at + TOKEN_LIFETIME,
    };
    Ok(Token {
        value: format!("{TOKEN_PREFIX}{encoded}"),
        expires,
    })
}

/// The clock tokens are minted by.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// One spoke's tokens: the credentials provider, the region and the current token. Clones
/// share the token.
#[derive(Clone)]
pub struct EksTokens {
    cluster: String,
    region: String,
    provider: SharedCredentialsProvider,
    clock: Clock,
    current: Arc<tokio::sync::Mutex<Option<Token>>>,
}

impl std::fmt::Debug for EksTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EksTokens")
            .field("cluster", &self.cluster)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl EksTokens {
    /// Tokens from the controller's standard AWS chain (the Secret's `profile` if it names one),
    /// through `AssumeRole` of its `roleARN` if it names one. Reads the configuration only:
    /// credentials are fetched at the first mint.
    pub async fn from_environment(auth: &AwsAuth, clock: Clock) -> Result<EksTokens, EksError> {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http);
        if let Some(profile) = &auth.profile {
            loader = loader.profile_name(profile);
        }
        let config = loader.load().await;
        let region = config
            .region()
            .map(|r| r.to_string())
            .ok_or_else(|| EksError::NoRegion {
                cluster: auth.cluster_name.clone(),
            })?;
        let base = config
            .credentials_provider()
            .ok_or_else(|| EksError::Credentials {
                cluster: auth.cluster_name.clone(),
                message: "the AWS SDK's chain has no credentials provider".into(),
            })?;
        let provider = match &auth.role_arn {
            None => base,
            Some(arn) => SharedCredentialsProvider::new(
                aws_config::sts::AssumeRoleProvider::builder(arn.clone())
                    .session_name(format!(
                        "flotilla-{}",
                        clock()
                            .duration_since(SystemTime::UNIX_EPOCH)
                            .unwrap_or_default()
                            .as_millis()
                    ))
                    .configure(&config)
                    .build_from_provider(base)
                    .await,
            ),
        };
        Ok(EksTokens::new(auth, region, provider, clock))
    }

    /// Tokens of `auth`'s cluster in `region` from `provider`.
    pub fn new(
        auth: &AwsAuth,
        region: String,
        provider: SharedCredentialsProvider,
        clock: Clock,
    ) -> EksTokens {
        EksTokens {
            cluster: auth.cluster_name.clone(),
            region,
            provider,
            clock,
            current: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// The current token, minted again (credentials fetched again) when less than
    /// [`RENEW_BEFORE`] of it remains. Concurrent callers wait for one mint.
    pub async fn token(&self) -> Result<Token, EksError> {
        let mut current = self.current.lock().await;
        let now = (self.clock)();
        if let Some(token) = &*current
            && fresh(token, now)
        {
            return Ok(token.clone());
        }
        let credentials =
            self.provider
                .provide_credentials()
                .await
                .map_err(|e| EksError::Credentials {
                    cluster: self.cluster.clone(),
                    message: crate::chain::error_chain(&e),
                })?;
        let token = mint(&credentials, &self.region, &self.cluster, now)?;
        tracing::debug!(cluster = %self.cluster, "minted an EKS token");
        *current = Some(token.clone());
        Ok(token)
    }

    /// The layer that puts `Authorization: Bearer <token>` on every request of a client.
    pub fn layer(self) -> EksLayer {
        EksLayer { tokens: self }
    }
}

/// Whether `token` may still be sent at `now`.
fn fresh(token: &Token, now: SystemTime) -> bool {
    now + RENEW_BEFORE < token.expires
}

/// After a failed mint, requests fail at once with its error for this long before the next
/// mint is tried: an STS that refuses is not asked again by every queued request.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// A [`tower::Layer`] of [`EksAuth`].
#[derive(Debug, Clone)]
pub struct EksLayer {
    tokens: EksTokens,
}

impl<S> tower::Layer<S> for EksLayer {
    type Service = EksAuth<S>;

    fn layer(&self, inner: S) -> EksAuth<S> {
        EksAuth {
            inner,
            tokens: self.tokens.clone(),
            token: None,
            minting: None,
            failed: None,
        }
    }
}

/// A service that is ready once it holds a live token (minted in `poll_ready`, so a request
/// never waits in `call`) and sends each request with it as the bearer token. A mint that fails
/// fails the requests of the next [`RETRY_AFTER`], never the service: kube's client buffers its
/// stack, and a buffered service whose `poll_ready` fails is closed for good.
pub struct EksAuth<S> {
    inner: S,
    tokens: EksTokens,
    token: Option<(Token, http::HeaderValue)>,
    minting: Option<BoxFuture<'static, Result<Token, EksError>>>,
    failed: Option<(SystemTime, String)>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for EksAuth<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EksAuth")
            .field("inner", &self.inner)
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

/// Why a request was not sent (the mint's error, or `call` without `poll_ready`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotSent(String);

impl<S, B> tower::Service<Request<B>> for EksAuth<S>
where
    S: tower::Service<Request<B>>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = futures::future::Either<
        futures::future::MapErr<S::Future, fn(S::Error) -> BoxError>,
        futures::future::Ready<Result<S::Response, BoxError>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        let now = (self.tokens.clock)();
        if let Some((at, _)) = &self.failed {
            if now.duration_since(*at).unwrap_or_default() < RETRY_AFTER {
                // `call` answers with the error without sending.
                return Poll::Ready(Ok(()));
            }
            self.failed = None;
        }
        if !self.token.as_ref().is_some_and(|(t, _)| fresh(t, now)) {
            self.token = None;
            let tokens = self.tokens.clone();
            let minting = self
                .minting
                .get_or_insert_with(|| Box::pin(async move { tokens.token().await }));
            let minted = match minting.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(result) => {
                    self.minting = None;
                    result.map_err(|e| e.to_string()).and_then(|token| {
                        let mut value =
                            http::HeaderValue::from_str(&format!("Bearer {}", token.value))
                                .map_err(|e| e.to_string())?;
                        value.set_sensitive(true);
                        Ok((token, value))
                    })
                }
            };
            match minted {
                Ok(token) => self.token = Some(token),
                Err(message) => {
                    tracing::warn!(cluster = %self.tokens.cluster, error = %message, "cannot mint an EKS token");
                    self.failed = Some((now, message));
                    return Poll::Ready(Ok(()));
                }
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some((_, message)) = &self.failed {
            return futures::future::Either::Right(futures::future::ready(Err(NotSent(
                message.clone(),
            )
            .into())));
        }
        let Some((_, value)) = &self.token else {
            return futures::future::Either::Right(futures::future::ready(Err(NotSent(
                "an EKS request was made before its token was ready".into(),
            )
            .into())));
        };
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, value.clone());
        futures::future::Either::Left(
            self.inner
                .call(request)
                .map_err(Into::into as fn(S::Error) -> BoxError),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Layer, Service, ServiceExt};

    /// aws-iam-authenticator's own vector (`pkg/token/token_test.go`, `TestGetWithSTS`, v0.7.18):
    /// the same credentials, region, cluster and time give the same token, byte for byte.
    #[test]
    fn the_token_is_aws_iam_authenticators_byte_for_byte() {
        let credentials = Credentials::new(
            "ASIAR2TG44V6AS3ZZE7C",
            "4KD5cntGcVmLWRdF5wvNRuzNL5Qxmp6OKVY6Fz/Q",
            None,
            None,
            "test",
        );
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_682_640_000);
        let token = mint(&credentials, "us-west-2", "test-cluster", at).unwrap();
        assert_eq!(
            token.value,
            "k8s-aws-v1.aHR0cHM6Ly9zdHMudXMtd2VzdC0yLmFtYXpvbmF3cy5jb20vP0FjdGlvbj1HZXRDYWxsZXJJZGVudGl0eSZWZXJzaW9uPTIwMTEtMDYtMTUmWC1BbXotQWxnb3JpdGhtPUFXUzQtSE1BQy1TSEEyNTYmWC1BbXotQ3JlZGVudGlhbD1BU0lBUjJURzQ0VjZBUzNaWkU3QyUyRjIwMjMwNDI4JTJGdXMtd2VzdC0yJTJGc3RzJTJGYXdzNF9yZXF1ZXN0JlgtQW16LURhdGU9MjAyMzA0MjhUMDAwMDAwWiZYLUFtei1FeHBpcmVzPTYwJlgtQW16LVNpZ25lZEhlYWRlcnM9aG9zdCUzQngtazhzLWF3cy1pZCZYLUFtei1TaWduYXR1cmU9ZTIxMWRiYTc3YWJhOWRjNDRiMGI2YmUzOGI4ZWFhZDA5MjU5OWM1MTU3ZjYzMTQ0NDRjNWI5ZDg1NzQ3ZjVjZQ"
        );
        assert_eq!(token.expires, at + Duration::from_secs(14 * 60));
    }

    /// Temporary credentials (web identity, an assumed role) carry their session token in the
    /// URL, signed with the rest.
    #[test]
    fn a_session_token_goes_into_the_signed_url() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_682_640_000);
        let with = |token: Option<&str>| {
            let credentials = Credentials::new(
                "ASIAR2TG44V6AS3ZZE7C",
                "4KD5cntGcVmLWRdF5wvNRuzNL5Qxmp6OKVY6Fz/Q",
                token.map(str::to_owned),
                None,
                "test",
            );
            let token = mint(&credentials, "eu-west-1", "prod", at).unwrap();
            use base64::Engine;
            String::from_utf8(
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(token.value.strip_prefix(TOKEN_PREFIX).unwrap())
                    .unwrap(),
            )
            .unwrap()
        };
        let plain = with(None);
        let session = with(Some("FwoGZX/session+token="));
        assert!(plain.starts_with(
            "https://sts.eu-west-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
        ));
        assert!(!plain.contains("X-Amz-Security-Token"));
        assert!(
            session.contains("X-Amz-Security-Token=FwoGZX%2Fsession%2Btoken%3D"),
            "{session}"
        );
        let signature = |url: &str| url.split("X-Amz-Signature=").nth(1).unwrap()[..64].to_owned();
        assert_ne!(signature(&plain), signature(&session));
    }

    /// Tokens of cluster `prod` on a settable clock, from [`FailingFirst`].
    fn tokens_failing_first(fail: usize) -> (EksTokens, Arc<AtomicUsize>, Arc<Mutex<SystemTime>>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let now = Arc::new(Mutex::new(
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        ));
        let clock: Clock = {
            let now = now.clone();
            Arc::new(move || *now.lock().unwrap())
        };
        let auth = AwsAuth {
            cluster_name: "prod".into(),
            role_arn: None,
            profile: None,
        };
        let provider = FailingFirst {
            calls: calls.clone(),
            fail,
        };
        let tokens = EksTokens::new(
            &auth,
            "us-east-1".into(),
            SharedCredentialsProvider::new(provider),
            clock,
        );
        (tokens, calls, now)
    }

    /// A token is used until a minute before it expires, then minted again with fresh
    /// credentials; the layer puts it on each request as a bearer token.
    #[tokio::test]
    async fn a_token_is_kept_then_minted_again_before_it_expires() {
        let (tokens, calls, now) = tokens_failing_first(0);
        let first = tokens.token().await.unwrap().value;
        *now.lock().unwrap() += Duration::from_secs(12 * 60);
        assert_eq!(
            tokens.token().await.unwrap().value,
            first,
            "12 minutes in: still good"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        *now.lock().unwrap() += Duration::from_secs(61);
        let second = tokens.token().await.unwrap().value;
        assert_ne!(second, first, "13 minutes in: minted again");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // Through the layer: the live token on each request, and no mint while it lasts.
        let mut service =
            tokens
                .layer()
                .layer(tower::service_fn(|request: Request<()>| async move {
                    Ok::<_, std::convert::Infallible>(
                        request.headers().get(http::header::AUTHORIZATION).cloned(),
                    )
                }));
        for _ in 0..3 {
            let header = service
                .ready()
                .await
                .unwrap()
                .call(Request::get("https://eks.example/api").body(()).unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(header, format!("Bearer {second}").as_str());
            assert!(header.is_sensitive());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        *now.lock().unwrap() += Duration::from_secs(13 * 60);
        let third = service
            .ready()
            .await
            .unwrap()
            .call(Request::get("https://eks.example/api").body(()).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_ne!(third, format!("Bearer {second}").as_str());
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    /// A provider that fails its first `fail` calls, then gives credentials.
    #[derive(Debug)]
    struct FailingFirst {
        calls: Arc<AtomicUsize>,
        fail: usize,
    }

    impl ProvideCredentials for FailingFirst {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            aws_credential_types::provider::future::ProvideCredentials::ready(if n < self.fail {
                Err(
                    aws_credential_types::provider::error::CredentialsError::not_loaded(
                        "no providers in chain provided credentials",
                    ),
                )
            } else {
                Ok(Credentials::new("AKID", "secret", None, None, "test"))
            })
        }
    }

    /// Through kube's own client (which buffers its stack): a failing credential chain fails
    /// requests with an error naming the cluster, sends nothing, asks the chain again only after
    /// [`RETRY_AFTER`], and the client works as soon as credentials come: it is never closed.
    #[tokio::test]
    async fn a_failed_mint_fails_requests_for_a_while_never_the_client() {
        let (tokens, calls, now) = tokens_failing_first(1);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let server = {
            let sent = sent.clone();
            tower::service_fn(move |request: Request<kube::client::Body>| {
                let sent = sent.clone();
                async move {
                    let header = request.headers().get(http::header::AUTHORIZATION).cloned();
                    sent.lock().unwrap().push(header);
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        kube::client::Body::from(b"{}".to_vec()),
                    ))
                }
            })
        };
        let client = kube::Client::new(tokens.layer().layer(server), "default");
        let get = || Request::get("/version").body(Vec::new()).unwrap();
        let error = client.request_text(get()).await.unwrap_err();
        let text = crate::chain::error_chain(&error);
        assert!(
            text.contains("cannot get AWS credentials for EKS cluster \"prod\"")
                && text.contains("no providers in chain"),
            "{text}"
        );
        assert!(client.request_text(get()).await.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "not asked again at once");
        assert!(
            sent.lock().unwrap().is_empty(),
            "nothing sent without a token"
        );
        *now.lock().unwrap() += RETRY_AFTER + Duration::from_secs(1);
        assert_eq!(client.request_text(get()).await.unwrap(), "{}");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 1);
        let header = sent[0].as_ref().unwrap().to_str().unwrap().to_owned();
        assert!(header.starts_with("Bearer k8s-aws-v1."), "{header}");
    }

    /// Credentials that expire before the token's 14 minutes end the token with them; China's
    /// regions sign for their own STS.
    #[test]
    fn short_credentials_end_the_token_and_china_has_its_own_sts() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let short = Credentials::new(
            "AKID",
            "secret",
            Some("session".into()),
            Some(at + Duration::from_secs(300)),
            "test",
        );
        let token = mint(&short, "cn-north-1", "prod", at).unwrap();
        assert_eq!(token.expires, at + Duration::from_secs(300));
        use base64::Engine;
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token.value.strip_prefix(TOKEN_PREFIX).unwrap())
                .unwrap(),
        )
        .unwrap();
        assert!(
            url.starts_with("https://sts.cn-north-1.amazonaws.com.cn/?"),
            "{url}"
        );
    }
}
