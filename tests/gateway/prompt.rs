//! The system prompt is built once per session and read back verbatim.

use crate::helpers::{FakeLlm, TestApp};

#[tokio::test]
async fn editing_the_memory_file_changes_new_sessions_only() {
    let llm = FakeLlm::echo().await;
    let memory_dir = tempfile::tempdir().expect("tempdir");
    let memory = memory_dir.path().join("memory.md");
    std::fs::write(&memory, "The user's name is Ada.").expect("write");
    let path = memory.clone();
    let app = TestApp::spawn_with(&llm, move |s| s.agent.memory_file = Some(path)).await;

    let (old, _) = app.say(None, "hello").await;
    std::fs::write(&memory, "The user's name is Grace.").expect("rewrite");
    app.say(Some(&old), "still me").await;
    let (new, _) = app.say(None, "hello again").await;

    let system = |index: usize| {
        llm.requests()[index].json()["messages"][0]["content"]
            .as_str()
            .expect("system")
            .to_owned()
    };
    assert!(system(0).contains("Ada"));
    assert_eq!(
        system(1),
        system(0),
        "the ongoing session keeps its prompt byte for byte"
    );
    assert!(system(2).contains("Grace"));
    assert!(!system(2).contains("Ada"));
    let stored = app.session_row(&old).await;
    assert_eq!(stored.system_prompt, system(0));
    assert_ne!(old, new);
    app.stop().await;
}
