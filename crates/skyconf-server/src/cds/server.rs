//! The CDS route on the agent port: `fetchConfigurations` decoded and its answer encoded by
//! tonic's gRPC machinery ([`Grpc::unary`], [`super::codec::CdsCodec`]), answered by
//! [`CdsService`].
//!
//! Written out instead of tonic's generated server, which boxes two futures per call on top of
//! the handler's (the route's and the method's): here the route's future is the one allocation of
//! a call answered at once, and the handler's answer is a ready future inside it. Only a poll that
//! may be held ([`super::hold`]) boxes a future of its own, which keeps its hold.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::Either;
use skyconf_proto::v3::ConfigurationSyncRequest;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use super::codec::{CdsCodec, EncodedCommands};
use super::{CdsService, Fetched, MAX_REQUEST_BYTES};

/// The CDS service as a gRPC route (`skywalking.v3.ConfigurationDiscoveryService`), for tonic's
/// `Routes` or `Server::add_service`.
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

impl NamedService for CdsServer {
    const NAME: &'static str = "skywalking.v3.ConfigurationDiscoveryService";
}

/// A call's answer, as a future of the route.
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the handler answers a call with.
type Answer = Result<Response<EncodedCommands>, Status>;

impl<B> tower::Service<http::Request<B>> for CdsServer
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != skyconf_proto::FETCH_CONFIGURATIONS_PATH {
            return Box::pin(ready(Ok(unimplemented())));
        }
        let fetch = Fetch(Arc::clone(&self.service));
        Box::pin(async move {
            let mut grpc = Grpc::new(CdsCodec).apply_max_message_size_config(Some(MAX_REQUEST_BYTES), None);
            Ok(grpc.unary(fetch, request).await)
        })
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

/// `fetchConfigurations` with its decoded message.
struct Fetch(Arc<CdsService>);

impl UnaryService<ConfigurationSyncRequest> for Fetch {
    type Response = EncodedCommands;
    type Future = Either<Ready<Answer>, BoxFuture<Answer>>;

    fn call(&mut self, request: Request<ConfigurationSyncRequest>) -> Self::Future {
        let Some(hold_for) = self.0.hold.hold_for(request.metadata()) else {
            return Either::Left(ready(Ok(Response::new(EncodedCommands(self.0.answer_now(&request))))));
        };
        let service = Arc::clone(&self.0);
        Either::Right(Box::pin(async move {
            match service.fetch(request, hold_for) {
                Fetched::Now(bytes) => Ok(Response::new(EncodedCommands(bytes))),
                Fetched::Held(held) => held.answer().await,
            }
        }))
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
}
