//! The CDS route on the agent port: `fetchConfigurations` decoded by tonic's gRPC machinery
//! ([`Grpc::unary`], [`super::codec::CdsCodec`]) and answered by [`CdsService`].
//!
//! A call is a [`CdsCall`] in two steps. Deciding reads the request and looks it up; it is one
//! boxed future, the only allocation of a call answered at once. A poll that may be held leaves
//! it with a [`Parked`] future of its own, and the request, its headers and extensions and the
//! decoding machinery are dropped then: a held poll keeps its waiter, its one timer (the hold's
//! end and the client's `grpc-timeout` merged) and the few fields it answers with.
//!
//! The client's `grpc-timeout` is honoured here, in both steps: once it passes, the call ends
//! `CANCELLED` (the client has given up on it by then).

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use skyconf_proto::v3::ConfigurationSyncRequest;
use tokio::time::Instant;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use super::codec::{CdsCodec, EncodedCommands, RawEncoder};
use super::{CdsService, MAX_REQUEST_BYTES, Parked};

/// The CDS service as a gRPC route (`skywalking.v3.ConfigurationDiscoveryService`): called
/// straight from the agent port, or through tonic's `Routes`.
#[derive(Debug, Clone)]
pub struct CdsServer {
    service: Arc<CdsService>,
}

impl CdsServer {
    /// The route answered by `service`.
    pub fn new(service: CdsService) -> Self {
        Self { service: Arc::new(service) }
    }
}

#[cfg(test)]
impl CdsServer {
    /// The route of a service the test keeps a handle on too.
    pub(crate) fn shared(service: &Arc<CdsService>) -> Self {
        Self { service: Arc::clone(service) }
    }
}

impl NamedService for CdsServer {
    const NAME: &'static str = "skywalking.v3.ConfigurationDiscoveryService";
}

impl<B> tower::Service<http::Request<B>> for CdsServer
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = CdsCall;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> CdsCall {
        if request.uri().path() != skyconf_proto::FETCH_CONFIGURATIONS_PATH {
            return CdsCall(State::Deciding(Box::pin(ready(Decided::Answer(unimplemented())))));
        }
        // Looked up by a name made once: a name given as text is parsed and checked on each call.
        static GRPC_TIMEOUT: http::HeaderName = http::HeaderName::from_static("grpc-timeout");
        let deadline = request
            .headers()
            .get(&GRPC_TIMEOUT)
            .and_then(|value| super::hold::parse_grpc_timeout(value.as_bytes()))
            .map(|timeout| Instant::now() + timeout);
        CdsCall(State::Deciding(Box::pin(decide(Arc::clone(&self.service), request, deadline))))
    }
}

/// One `fetchConfigurations` call (see the module docs).
pub struct CdsCall(State);

impl std::fmt::Debug for CdsCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = match self.0 {
            State::Deciding(_) => "deciding",
            State::Parked(_) => "parked",
            State::Done => "done",
        };
        f.debug_tuple("CdsCall").field(&step).finish()
    }
}

#[cfg(test)]
impl CdsCall {
    /// The size of its parked future, once it is parked.
    pub(crate) fn parked_bytes(&self) -> Option<usize> {
        match &self.0 {
            State::Parked(parked) => Some(std::mem::size_of_val(&**parked)),
            _ => None,
        }
    }
}

/// Where a call is.
enum State {
    /// Its request is read and looked up.
    Deciding(Pin<Box<dyn Future<Output = Decided> + Send>>),
    /// A poll that may be held, with nothing of its request but what it answers with.
    Parked(Parked),
    /// Answered.
    Done,
}

/// What deciding ends with.
enum Decided {
    /// The answer, now.
    Answer(http::Response<tonic::body::Body>),
    /// A poll that may be held.
    Park(Parked),
}

impl Future for CdsCall {
    type Output = Result<http::Response<tonic::body::Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let answer = match &mut self.0 {
                State::Deciding(deciding) => match std::task::ready!(deciding.as_mut().poll(cx)) {
                    Decided::Answer(answer) => answer,
                    Decided::Park(parked) => {
                        // The request and its decoding end here; the parked poll is polled at
                        // once, in the same poll as its lookup's decision.
                        self.0 = State::Parked(parked);
                        continue;
                    }
                },
                State::Parked(parked) => std::task::ready!(parked.as_mut().poll(cx)),
                // Polled after its answer (no caller does): it has nothing more to give.
                State::Done => return Poll::Pending,
            };
            self.0 = State::Done;
            return Poll::Ready(Ok(answer));
        }
    }
}

/// Reads the call's message, with tonic's checks (its size bound, its encoding), and answers it
/// now or parks it; `CANCELLED` once `deadline` passes first.
async fn decide<B>(service: Arc<CdsService>, request: http::Request<B>, deadline: Option<Instant>) -> Decided
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    let mut parked = None;
    let mut grpc = Grpc::new(CdsCodec).apply_max_message_size_config(Some(MAX_REQUEST_BYTES), None);
    let fetch = Fetch { service: &service, deadline, parked: &mut parked };
    let answered = match deadline {
        None => grpc.unary(fetch, request).await,
        Some(deadline) => match tokio::time::timeout_at(deadline, grpc.unary(fetch, request)).await {
            Ok(answered) => answered,
            Err(_) => return Decided::Answer(cancelled()),
        },
    };
    match parked {
        Some(parked) => Decided::Park(parked),
        None => Decided::Answer(answered),
    }
}

/// Another method of the service: UNIMPLEMENTED, as any gRPC server answers a method it lacks.
fn unimplemented() -> http::Response<tonic::body::Body> {
    let mut response = http::Response::new(tonic::body::Body::default());
    let headers = response.headers_mut();
    headers.insert(Status::GRPC_STATUS, (tonic::Code::Unimplemented as i32).into());
    headers.insert(http::header::CONTENT_TYPE, tonic::metadata::GRPC_CONTENT_TYPE);
    response
}

/// A call whose client's deadline passed: `CANCELLED`.
pub(super) fn cancelled() -> http::Response<tonic::body::Body> {
    Status::cancelled("Timeout expired").into_http()
}

/// `bytes` (an encoded `Commands`) as the call's answer, framed as [`Grpc::unary`] frames it.
pub(super) fn answer(bytes: Bytes) -> http::Response<tonic::body::Body> {
    let message = futures_util::stream::once(ready(Ok(EncodedCommands(bytes))));
    let body = tonic::codec::EncodeBody::new_server(RawEncoder, message, None, Default::default(), None);
    let mut response = http::Response::new(tonic::body::Body::new(body));
    *response.version_mut() = http::Version::HTTP_2;
    response.headers_mut().insert(http::header::CONTENT_TYPE, tonic::metadata::GRPC_CONTENT_TYPE);
    response
}

/// `fetchConfigurations` with its decoded message: answered now, or handed out as a
/// [`Parked`] poll (its answer to tonic is then a placeholder, dropped).
struct Fetch<'a> {
    service: &'a Arc<CdsService>,
    deadline: Option<Instant>,
    parked: &'a mut Option<Parked>,
}

impl UnaryService<ConfigurationSyncRequest> for Fetch<'_> {
    type Response = EncodedCommands;
    type Future = Ready<Result<Response<EncodedCommands>, Status>>;

    fn call(&mut self, request: Request<ConfigurationSyncRequest>) -> Self::Future {
        let Some(hold_for) = self.service.hold.hold_for(request.metadata()) else {
            return ready(Ok(Response::new(EncodedCommands(self.service.answer_now(&request)))));
        };
        *self.parked = Some(Arc::clone(self.service).parked(request, hold_for, self.deadline));
        ready(Ok(Response::new(EncodedCommands(Bytes::new()))))
    }
}

/// Calling the route as the agent port does, from in-process tests.
#[cfg(test)]
pub(crate) mod testing {
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use prost::Message;
    use skyconf_proto::v3::ConfigurationSyncRequest;

    /// `request` as the agent port hands it to the route: its message framed, its metadata as
    /// headers, its extensions (the connection) kept.
    pub(crate) fn http_request(request: tonic::Request<ConfigurationSyncRequest>) -> http::Request<tonic::body::Body> {
        let (metadata, extensions, message) = request.into_parts();
        let encoded = message.encode_to_vec();
        let mut framed = vec![0];
        framed.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
        framed.extend_from_slice(&encoded);
        let body = tonic::body::Body::new(http_body_util::Full::new(Bytes::from(framed)));
        let mut call = http::Request::post(skyconf_proto::FETCH_CONFIGURATIONS_PATH).body(body).unwrap();
        *call.headers_mut() = metadata.into_headers();
        call.headers_mut().insert(http::header::CONTENT_TYPE, tonic::metadata::GRPC_CONTENT_TYPE);
        *call.extensions_mut() = extensions;
        call
    }

    /// The encoded `Commands` of an answer, or its status.
    pub(crate) async fn answered(answer: http::Response<tonic::body::Body>) -> Result<Bytes, tonic::Status> {
        if let Some(status) = tonic::Status::from_header_map(answer.headers()) {
            return Err(status);
        }
        let collected = answer.into_body().collect().await.expect("the body");
        let trailers = collected.trailers().cloned().expect("grpc-status in the trailers");
        match tonic::Status::from_header_map(&trailers) {
            Some(status) if status.code() != tonic::Code::Ok => Err(status),
            _ => Ok(collected.to_bytes().slice(5..)),
        }
    }

    /// Calls `service`'s route with `request`: the encoded `Commands`, or the call's status.
    pub(crate) async fn fetch(
        service: &std::sync::Arc<super::CdsService>,
        request: tonic::Request<ConfigurationSyncRequest>,
    ) -> Result<Bytes, tonic::Status> {
        let answer = tower::ServiceExt::oneshot(super::CdsServer::shared(service), http_request(request)).await;
        answered(answer.unwrap_or_else(|never| match never {})).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::served::ServedTable;
    use http_body_util::BodyExt;
    use prost::Message;
    use tower::ServiceExt;

    fn call(path: &str, message: &ConfigurationSyncRequest) -> http::Request<tonic::body::Body> {
        let encoded = message.encode_to_vec();
        let mut framed = vec![0];
        framed.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
        framed.extend_from_slice(&encoded);
        http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .body(tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(framed))))
            .unwrap()
    }

    fn server() -> CdsServer {
        let table = skyconf_core::read("configurations:\n  svc:\n    k: v\n").unwrap();
        CdsService::new(Arc::new(ServedTable::new(table)), super::super::CdsOptions::default()).into_server()
    }

    /// The route answers `fetchConfigurations` with the service's command, and any other method of
    /// the service UNIMPLEMENTED, as tonic's generated server does.
    #[tokio::test]
    async fn fetch_is_answered_and_another_method_is_unimplemented() {
        let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
        let answer = server().oneshot(call(skyconf_proto::FETCH_CONFIGURATIONS_PATH, &request)).await.unwrap();
        assert_eq!(answer.status(), http::StatusCode::OK);
        let collected = answer.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned().expect("grpc-status in the trailers");
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        let body = collected.to_bytes();
        let commands = skyconf_proto::v3::Commands::decode(&body[5..]).unwrap();
        assert_eq!(commands.commands.len(), 1, "the service's command: the agent holds no digest");

        let path = "/skywalking.v3.ConfigurationDiscoveryService/other";
        let answer = server().oneshot(call(path, &request)).await.unwrap();
        assert_eq!(answer.headers().get("grpc-status").unwrap(), "12");
        assert_eq!(answer.headers().get(http::header::CONTENT_TYPE).unwrap(), "application/grpc");
    }

    /// A request whose message arrives after `delay`, with the client's `grpc-timeout`.
    fn slow(
        message: &ConfigurationSyncRequest,
        timeout: &str,
        delay: std::time::Duration,
    ) -> http::Request<tonic::body::Body> {
        let framed = call(skyconf_proto::FETCH_CONFIGURATIONS_PATH, message).into_body();
        let late = futures_util::stream::once(async move {
            tokio::time::sleep(delay).await;
            let bytes = framed.collect().await.unwrap().to_bytes();
            Ok::<_, Infallible>(http_body::Frame::data(bytes))
        });
        let mut request = http::Request::post(skyconf_proto::FETCH_CONFIGURATIONS_PATH)
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .body(tonic::body::Body::new(http_body_util::StreamBody::new(late)))
            .unwrap();
        request.headers_mut().insert("grpc-timeout", timeout.parse().unwrap());
        request
    }

    /// The client's `grpc-timeout` bounds the whole call: a message that never comes within it,
    /// and a held poll whose hold would outlast it (its message came late), end `CANCELLED` at
    /// the deadline, on the held poll's one timer, and the hold is released.
    #[tokio::test(start_paused = true)]
    async fn the_clients_deadline_ends_a_call_that_would_outlast_it() {
        use std::time::Duration;
        use tokio::time::Instant;
        let served = Arc::new(ServedTable::new(skyconf_core::read("configurations:\n  svc:\n    k: v\n").unwrap()));
        let stop = tokio_util::sync::CancellationToken::new();
        let service = CdsService::new(Arc::clone(&served), super::super::CdsOptions::default())
            .with_holding(super::super::HoldOptions::default(), stop.clone());
        let service = Arc::new(service);
        let digest = served.snapshot().answer("svc").digest.as_str().to_owned();
        let unchanged = ConfigurationSyncRequest { service: "svc".into(), uuid: digest };

        let started = Instant::now();
        let never = slow(&unchanged, "5S", Duration::from_secs(3600));
        let answer = CdsServer::shared(&service).oneshot(never).await.unwrap();
        assert_eq!(answer.headers().get("grpc-status").unwrap(), "1", "CANCELLED");
        assert_eq!(started.elapsed(), Duration::from_secs(5));

        // 10 s: held until 8 s after its message, less a tenth at most: past the deadline.
        let started = Instant::now();
        let late = slow(&unchanged, "10S", Duration::from_secs(3));
        let call = tokio::spawn(CdsServer::shared(&service).oneshot(late));
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(service.held().get(), 1, "held once its message came");
        let answer = call.await.unwrap().unwrap();
        assert_eq!(answer.headers().get("grpc-status").unwrap(), "1", "CANCELLED");
        assert_eq!(started.elapsed(), Duration::from_secs(10), "at the client's deadline");
        assert_eq!(service.held().get(), 0);
        assert_eq!(service.metrics.held_released(super::super::hold::Release::Cancelled), 1);
    }
}
