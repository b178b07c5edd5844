fn main() -> std::process::ExitCode {
    surrealdb_server::init(surrealdb_server::core::CommunityComposer())
}
