//! Noticing that a client has gone. actix-web keeps running a handler after its client
//! disconnects (actix-web issue 3462), so kbq watches the connection itself: on connect it
//! keeps a duplicate of the socket, and a handler that wants to stop early waits on
//! [`PeerWatch::closed`], which resolves when the peer has closed its side, usually through
//! [`unless_client_leaves`].

use std::any::Any;
use std::future::Future;
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;

use crate::error::ApiError;

/// A duplicate of a connection's socket, kept in the connection's data.
pub struct PeerWatch {
    socket: tokio::net::TcpStream,
}

/// `HttpServer::on_connect` hook: adds a [`PeerWatch`] to plain TCP connections.
pub fn on_connect(conn: &dyn Any, data: &mut Extensions) {
    let Some(stream) = conn.downcast_ref::<TcpStream>() else {
        return;
    };
    let watch = socket2::SockRef::from(stream).try_clone().and_then(|s| {
        s.set_nonblocking(true)?;
        tokio::net::TcpStream::from_std(std::net::TcpStream::from(s))
    });
    match watch {
        Ok(socket) => {
            data.insert(PeerWatch { socket });
        }
        Err(e) => tracing::debug!(error = %e, "no peer watch for this connection"),
    }
}

impl PeerWatch {
    /// Resolves once the peer has closed the connection (or it failed). Bytes the peer sends
    /// meanwhile (a pipelined request) are left for actix to read.
    pub async fn closed(&self) {
        let mut byte = [0u8; 1];
        loop {
            match self.socket.peek(&mut byte).await {
                Ok(0) | Err(_) => return,
                // Data waiting: not closed. Look again shortly rather than spin on it.
                Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// Runs `work` until it finishes or the client closes the connection, whichever comes first.
/// When the client leaves, `work` is dropped (which cancels what it was doing: a chat session,
/// a provider call and its retries) and the answer is a 503 that no one will read; `what`
/// says in the log what was given up. A connection without a watch just runs `work`.
pub async fn unless_client_leaves<T>(
    http: &HttpRequest,
    work: impl Future<Output = T>,
    what: &str,
) -> Result<T, ApiError> {
    let Some(watch) = http.conn_data::<PeerWatch>() else {
        return Ok(work.await);
    };
    tokio::select! {
        done = work => Ok(done),
        () = watch.closed() => {
            tracing::info!("the client closed the connection; {what}");
            Err(ApiError::unavailable("the client closed the connection"))
        }
    }
}
