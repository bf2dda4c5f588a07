//! The gRPC codec of the CDS service: requests are decoded with prost; answers are written as the
//! bytes they already are (pre-encoded `Commands`, see `skyconf_core::codec::PreEncoded`).

use bytes::{BufMut, Bytes};
use skyconf_proto::v3::ConfigurationSyncRequest;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

/// An encoded `skywalking.v3.Commands` message.
#[derive(Debug, Clone, Default)]
pub struct EncodedCommands(pub Bytes);

/// Prost in, raw bytes out.
#[derive(Debug, Clone, Copy, Default)]
pub struct CdsCodec;

impl Codec for CdsCodec {
    type Encode = EncodedCommands;
    type Decode = ConfigurationSyncRequest;
    type Encoder = RawEncoder;
    type Decoder = ProstDecoder<ConfigurationSyncRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(Default::default())
    }
}

/// Copies pre-encoded bytes into the frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = EncodedCommands;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        dst.put_slice(&item.0);
        Ok(())
    }
}
