//! End-to-end tests of the OpAMP server over real sockets: the plain HTTP transport
//! (`http`), the WebSocket transport with a client written from the spec's framing (`ws`), and
//! the independent clients from PyPI and npm (`interop`).

mod http;
mod interop;
mod util;
mod ws;
