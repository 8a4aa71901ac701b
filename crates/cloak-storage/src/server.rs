//! `cloak server`: any [`Storage`] backend served over TCP with the [`wire`](crate::wire) protocol.
//!
//! Each connection is served in order: requests are applied one after another and answered in
//! the order they came, with answers to pipelined requests written out together. Connections are
//! independent; a malformed frame closes only its own connection.

use std::future::Future;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::net::{TcpListener, TcpStream};

use crate::wire::{self, WireError};
use crate::{Storage, StorageError};

/// Accepts connections until `shutdown` completes, then closes every connection.
pub async fn serve(
    listener: TcpListener,
    storage: Arc<dyn Storage>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    // Dropping the set when we return aborts the connection tasks.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(error) => {
                        // Out of file descriptors and the like: keep serving the others.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let storage = storage.clone();
                connections.spawn(async move {
                    tracing::debug!(%peer, "storage client connected");
                    match serve_connection(stream, storage).await {
                        Ok(()) | Err(WireError::Closed) => {}
                        Err(error) => tracing::warn!(%peer, %error, "storage connection closed"),
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => return Ok(()),
        }
    }
}

async fn serve_connection(stream: TcpStream, storage: Arc<dyn Storage>) -> Result<(), WireError> {
    stream.set_nodelay(true)?;
    let (mut reader, mut writer) = stream.into_split();
    let mut input = BytesMut::with_capacity(64 * 1024);
    let mut answers = Vec::new();
    loop {
        let frame = wire::read_frame(&mut reader, &mut input).await?;
        let (id, op) = match wire::decode_request(frame) {
            Ok(request) => request,
            Err(error) => {
                let answer = Err(StorageError(format!("protocol error: {error}")));
                answers.push(wire::encode_response(0, &answer));
                wire::write_frames(&mut writer, &answers).await?;
                return Err(error);
            }
        };
        let result = storage.call(op).await;
        answers.push(wire::encode_response(id, &result));
        // Answer pipelined requests together: write once nothing complete is buffered.
        if !has_frame(&input) {
            wire::write_frames(&mut writer, &answers).await?;
            answers.clear();
        }
    }
}

fn has_frame(input: &BytesMut) -> bool {
    input.len() >= 4
        && input.len() >= 4 + u32::from_le_bytes(input[..4].try_into().expect("4 bytes")) as usize
}
