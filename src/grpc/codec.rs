//! The protobuf codec of retryd's services: tonic-prost's, except that a
//! request that does not decode is the caller's error (INVALID_ARGUMENT with a
//! BadRequest naming the request), not INTERNAL as tonic-prost answers.
//! Bad bytes are input like any other; INTERNAL is kept for our own faults.

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};
use tonic_types::{ErrorDetails, StatusExt as _};

/// [`ProstCodec`] with decode errors answered INVALID_ARGUMENT.
#[derive(Debug, Clone)]
pub struct Codec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(ProstCodec::default())
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = InvalidArgumentDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder(self.0.decoder())
    }
}

/// A [`ProstDecoder`] whose errors are INVALID_ARGUMENT.
#[derive(Debug)]
pub struct InvalidArgumentDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for InvalidArgumentDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            let description = format!("the request is not a valid protobuf message: {}", status.message());
            Status::with_error_details(
                tonic::Code::InvalidArgument,
                description.clone(),
                ErrorDetails::with_bad_request_violation("request", description),
            )
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
