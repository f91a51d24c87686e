//! The fake MCP server of [`switchboard_test_support::mcp`] on stdio.

use rmcp::ServiceExt;
use switchboard_test_support::mcp::FakeMcp;

#[tokio::main]
async fn main() {
    let server = FakeMcp::from_args(std::env::args().skip(1));
    let Ok(running) = server.serve(rmcp::transport::stdio()).await else {
        std::process::exit(2);
    };
    let _ = running.waiting().await;
}
