//! Long-term memory per person: a fact the model keeps with the `memory`
//! tool reaches the person's next conversations (on any linked platform)
//! through their frozen system prompt, `/memory` lists and removes facts,
//! nobody else ever sees them, group chats write only when the speaker asks
//! about themselves, the limits hold, and a running session's prompt never
//! changes mid-way (only `/new` and compaction bring the facts up to date).

use serde_json::{Value, json};
use switchboard_contract::ChatKind;
use switchboard_test_support::telegram::{BOT_USERNAME, FakeTelegram, TgUser};

use crate::helpers::{
    FakeLlm, Recorded, Reply, TestApp, last_is_tool_result, last_user_text, telegram_settings,
};
use crate::identity::{Fake, code_in};
use crate::terminal::run_chat_as;

const ADA: TgUser = TgUser {
    id: 777,
    first_name: "Ada",
};
const BOB: TgUser = TgUser {
    id: 888,
    first_name: "Bob",
};
const GROUP: i64 = -100_456;

fn is_summary_request(body: &Value) -> bool {
    last_user_text(body).starts_with("[switchboard] Compaction")
}

fn is_extraction_request(body: &Value) -> bool {
    last_user_text(body).starts_with("[switchboard] Memory")
}

/// A model that uses the memory tool as the user's message says —
/// `remember: FACT`, `remember personally: FACT` (with `personal`),
/// `forget #ID`, `list memory` — and then reports the tool's result:
/// `Noted.`, `Facts: [...]`, or `Refused: ERROR`. Anything else is echoed.
fn memory_model(body: &Value) -> Reply {
    if is_summary_request(body) {
        return Reply::Text("Summary: small talk.".to_owned());
    }
    if is_extraction_request(body) {
        return Reply::Text(
            "- The user is vegetarian.\n- The user rejected Lisbon: too hot in August.".to_owned(),
        );
    }
    let n = body["messages"].as_array().map_or(0, Vec::len);
    if last_is_tool_result(body) {
        let content = body["messages"][n - 1]["content"].as_str().unwrap_or("{}");
        let result: Value = serde_json::from_str(content).expect("tool results are JSON");
        return Reply::Text(if result["success"] == true {
            match &result["facts"] {
                Value::Array(facts) => format!("Facts: {}", Value::Array(facts.clone())),
                _ => "Noted.".to_owned(),
            }
        } else {
            format!("Refused: {}", result["error"].as_str().unwrap_or_default())
        });
    }
    let text = last_user_text(body);
    let args = if let Some((_, fact)) = text.split_once("remember personally: ") {
        json!({"action": "remember", "text": fact, "personal": true})
    } else if let Some((_, fact)) = text.split_once("remember: ") {
        json!({"action": "remember", "text": fact})
    } else if let Some((_, id)) = text.split_once("forget #") {
        json!({"action": "forget", "id": id.trim().parse::<i64>().expect("an id")})
    } else if text.contains("list memory") {
        json!({"action": "list"})
    } else {
        return Reply::Text(format!("echo: {text}"));
    };
    Reply::Tools(vec![(
        format!("m{n}"),
        "memory".to_owned(),
        args.to_string(),
    )])
}

/// The test settings with the memory tool offered.
fn with_memory(settings: &mut switchboard::config::Settings) {
    settings.agent.tools.push("memory".to_owned());
}

/// The gateway with the `memory` tool, on the fake Telegram too.
async fn on_telegram(llm: &FakeLlm, telegram: &FakeTelegram) -> TestApp {
    TestApp::spawn_with(llm, |s| {
        s.telegram = Some(telegram_settings(telegram));
        with_memory(s);
    })
    .await
}

fn system(request: &Recorded) -> String {
    request.json()["messages"][0]["content"]
        .as_str()
        .expect("a system prompt")
        .to_owned()
}

/// The system prompt of the model's latest request.
fn last_system(llm: &FakeLlm) -> String {
    system(llm.requests().last().expect("a request"))
}

/// The texts of the facts kept in the database, oldest first.
async fn stored_facts(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar::<_, String>("SELECT text FROM memories ORDER BY id")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("rows")
}

#[tokio::test]
async fn a_fact_remembered_on_telegram_shapes_a_new_conversation_on_the_api_after_linking() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(memory_model).await;
    let app = on_telegram(&llm, &telegram).await;

    let noted = telegram
        .ask(ADA, "please remember: Ada prefers metric units.")
        .await;
    assert!(noted.contains("Noted."), "{noted}");
    assert_eq!(stored_facts(&app).await, ["Ada prefers metric units."]);
    let link = telegram.ask(ADA, "/link").await;
    let (_, linked) = app
        .say_as("ada-laptop", &format!("/link {}", code_in(&link)))
        .await;
    assert!(linked.starts_with("Linked"), "{linked}");
    let (_, started) = app.say_as("ada-laptop", "/new").await;
    assert!(
        started.starts_with("Started a new conversation"),
        "{started}"
    );
    let (_, reply) = app.say_as("ada-laptop", "how far is Lyon?").await;

    assert_eq!(reply, "echo: how far is Lyon?");
    let prompt = last_system(&llm);
    assert!(
        prompt.contains("# What you remember about this person"),
        "{prompt}"
    );
    assert!(prompt.contains(": Ada prefers metric units."), "{prompt}");
    // The Telegram conversation began before the fact was kept: its prompt
    // stayed as it was.
    assert!(!system(&llm.requests()[0]).contains("metric"));
    app.stop().await;
}

#[tokio::test]
async fn a_fact_remembered_on_telegram_shapes_a_new_conversation_in_the_terminal_after_linking() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(memory_model).await;
    let app = on_telegram(&llm, &telegram).await;
    telegram
        .ask(ADA, "please remember: Ada prefers metric units.")
        .await;
    let link = telegram.ask(ADA, "/link").await;

    // `switchboard chat` on the same database (its default tools include
    // `memory`), as the local user "ada".
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n[llm]\nbase_url = \"{}\"\nmodel = \"fake-model\"\n\
             api_key_env = \"SB_TEST_NO_KEY\"\n",
            app.gateway.settings.database.url,
            llm.openai_base()
        ),
    )
    .expect("config");
    let input = format!("/link {}\n/new\nhow far is Lyon?\n", code_in(&link));
    let output = run_chat_as("ada", &config, None, &input).await;

    assert!(output.contains("Linked"), "{output}");
    assert!(output.contains("echo: how far is Lyon?"), "{output}");
    let prompt = last_system(&llm);
    assert!(prompt.contains(": Ada prefers metric units."), "{prompt}");
    app.stop().await;
}

#[tokio::test]
async fn linking_away_from_an_account_takes_its_facts_along() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(memory_model).await;
    let app = on_telegram(&llm, &telegram).await;

    // The Telegram account keeps a fact, then joins the API account's
    // principal: its own principal is left without identities.
    telegram.ask(ADA, "remember: Ada cycles to work.").await;
    let (_, link) = app.say_as("ada-laptop", "/link").await;
    let linked = telegram
        .ask(ADA, &format!("/link {}", code_in(&link)))
        .await;
    assert!(linked.starts_with("Linked"), "{linked}");
    let (_, listed) = app.say_as("ada-laptop", "/memory").await;
    assert!(listed.contains("1. Ada cycles to work."), "{listed}");
    app.say_as("ada-laptop", "/new").await;
    app.say_as("ada-laptop", "how do I get to work?").await;

    assert!(last_system(&llm).contains(": Ada cycles to work."));
    app.stop().await;
}

#[tokio::test]
async fn memory_forget_removes_the_fact_from_the_next_sessions_prompt() {
    let llm = FakeLlm::start(memory_model).await;
    let app = TestApp::spawn_with(&llm, with_memory).await;

    let (_, noted) = app.say_as("ada", "remember: Ada likes tea.").await;
    assert_eq!(noted, "Noted.");
    let (_, noted) = app.say_as("ada", "remember: Ada lives in Lyon.").await;
    assert_eq!(noted, "Noted.");
    let (_, listed) = app.say_as("ada", "/memory").await;
    assert_eq!(
        listed,
        "What I remember about you (2 of at most 50):\n1. Ada likes tea.\n2. Ada lives in Lyon.\n\
         Remove one with /memory forget N, all with /memory clear. Changes reach new \
         conversations (/new); this one keeps what it started with."
    );
    app.say_as("ada", "/new").await;
    app.say_as("ada", "hello").await;
    assert!(last_system(&llm).contains(": Ada likes tea."));

    let (_, forgotten) = app.say_as("ada", "/memory forget 1").await;
    assert_eq!(
        forgotten,
        "Forgotten: Ada likes tea.\nNew conversations (/new) will not know it; this one keeps \
         what it started with."
    );
    let (_, missing) = app.say_as("ada", "/memory forget 5").await;
    assert_eq!(
        missing,
        "There is no fact 5: I remember one thing about you (see /memory)."
    );
    let (_, usage) = app.say_as("ada", "/memory forget").await;
    assert!(usage.starts_with("Usage: /memory"), "{usage}");
    app.say_as("ada", "/new").await;
    app.say_as("ada", "hello again").await;
    let prompt = last_system(&llm);
    assert!(!prompt.contains("Ada likes tea"), "{prompt}");
    assert!(prompt.contains(": Ada lives in Lyon."), "{prompt}");

    let (_, cleared) = app.say_as("ada", "/memory clear").await;
    assert!(cleared.starts_with("Cleared"), "{cleared}");
    app.say_as("ada", "/new").await;
    app.say_as("ada", "and now?").await;
    let prompt = last_system(&llm);
    assert!(
        !prompt.contains("# What you remember about this person"),
        "no facts, no section: {prompt}"
    );
    let (_, empty) = app.say_as("ada", "/memory").await;
    assert!(
        empty.starts_with("I remember nothing about you yet."),
        "{empty}"
    );
    app.stop().await;
}

#[tokio::test]
async fn another_person_never_sees_the_fact_nor_can_forget_it() {
    let llm = FakeLlm::start(memory_model).await;
    let app = TestApp::spawn_with(&llm, with_memory).await;

    app.say_as("ada", "remember: Ada's door code is 4711.")
        .await;
    let id: i64 = sqlx::query_scalar("SELECT id FROM memories")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("row");

    let (_, listed) = app.say_as("bob", "list memory").await;
    assert_eq!(listed, "Facts: []");
    assert!(!last_system(&llm).contains("4711"));
    let (_, refused) = app.say_as("bob", &format!("forget #{id}")).await;
    assert!(
        refused.starts_with(&format!("Refused: no fact with id {id}")),
        "{refused}"
    );
    let (_, memory) = app.say_as("bob", "/memory").await;
    assert!(
        memory.starts_with("I remember nothing about you"),
        "{memory}"
    );
    let (_, cleared) = app.say_as("bob", "/memory clear").await;
    assert!(cleared.contains("nothing to clear"), "{cleared}");
    app.say_as("bob", "/new").await;
    app.say_as("bob", "anything about door codes?").await;

    assert!(!last_system(&llm).contains("4711"));
    assert_eq!(stored_facts(&app).await, ["Ada's door code is 4711."]);
    // Ada's own conversation began before the fact was kept, so no prompt
    // at all holds it: Bob's least of all.
    assert!(llm.requests().iter().all(|r| !system(r).contains("4711")));
    app.stop().await;
}

#[tokio::test]
async fn a_group_chat_writes_only_what_the_speaker_asked_for_and_only_to_them() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(memory_model).await;
    let app = on_telegram(&llm, &telegram).await;
    let to_bot = |text: &str| format!("@{BOT_USERNAME} {text}");

    let refused = telegram
        .ask_in_group(GROUP, ADA, &to_bot("remember: Bob is grumpy."))
        .await;
    assert!(
        refused.contains("Refused: this is a group chat"),
        "{refused}"
    );
    assert!(stored_facts(&app).await.is_empty());

    let noted = telegram
        .ask_in_group(
            GROUP,
            ADA,
            &to_bot("remember personally: Ada likes green tea."),
        )
        .await;
    assert!(noted.contains("Noted."), "{noted}");
    assert_eq!(stored_facts(&app).await, ["Ada likes green tea."]);

    // The fact is Ada's: in her direct chat, not Bob's, and never in a
    // group's prompt.
    let ada = telegram.ask(ADA, "/memory").await;
    assert!(ada.contains("Ada likes green tea."), "{ada}");
    let bob = telegram.ask(BOB, "/memory").await;
    assert!(bob.contains("I remember nothing about you yet."), "{bob}");
    let here = telegram.ask_in_group(GROUP, ADA, &to_bot("/memory")).await;
    assert!(here.contains("direct chat"), "{here}");
    telegram.ask_in_group(GROUP, BOB, &to_bot("/new")).await;
    telegram
        .ask_in_group(GROUP, ADA, &to_bot("what do I drink?"))
        .await;
    assert!(!last_system(&llm).contains("green tea"));
    telegram.ask(ADA, "/new").await;
    telegram.ask(ADA, "what do I drink?").await;
    assert!(last_system(&llm).contains(": Ada likes green tea."));
    app.stop().await;
}

#[tokio::test]
async fn the_limits_refuse_with_clear_errors() {
    let llm = FakeLlm::start(memory_model).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_memory(s);
        s.memory.max_entries = std::num::NonZero::new(2).unwrap();
        s.memory.max_entry_chars = 30;
    })
    .await;

    let (_, too_long) = app
        .say_as("ada", "remember: Ada has a very long fact to tell.")
        .await;
    assert_eq!(
        too_long,
        "Refused: invalid arguments: the fact is 33 characters long; a fact may have at most \
         30: shorten it"
    );
    for fact in ["One.", "Two."] {
        let (_, noted) = app.say_as("ada", &format!("remember: {fact}")).await;
        assert_eq!(noted, "Noted.");
    }
    let (_, full) = app.say_as("ada", "remember: Three.").await;
    assert!(
        full.starts_with("Refused: memory is full: 2 of 2 facts are kept."),
        "{full}"
    );
    assert_eq!(stored_facts(&app).await, ["One.", "Two."]);
    let (_, listed) = app.say_as("ada", "/memory").await;
    assert!(listed.contains("(2 of at most 2)"), "{listed}");
    app.stop().await;
}

#[tokio::test]
async fn a_running_sessions_prompt_stays_byte_for_byte_while_memory_changes() {
    let llm = FakeLlm::start(memory_model).await;
    let app = TestApp::spawn_with(&llm, with_memory).await;
    app.say_as("ada", "remember: Ada likes tea.").await;
    app.say_as("ada", "/new").await;
    let before = llm.requests().len();

    let (session, _) = app.say_as("ada", "hello").await;
    app.say_as("ada", "remember: Ada lives in Lyon.").await;
    app.say_as("ada", "/memory forget 1").await;
    app.say_as("ada", "list memory").await;
    let (same, _) = app.say_as("ada", "bye").await;

    assert_eq!(same, session);
    let requests = &llm.requests()[before..];
    assert_eq!(requests.len(), 6, "three turns and two tool rounds");
    let prompt = system(&requests[0]);
    assert!(prompt.contains(": Ada likes tea."), "{prompt}");
    for pair in requests.windows(2) {
        let previous = pair[0].raw_messages();
        let next = pair[1].raw_messages();
        let open = previous.strip_suffix(']').expect("array");
        assert!(
            next.starts_with(open),
            "prefix changed:\n{previous}\n{next}"
        );
    }
    assert_eq!(app.session_row(&session).await.system_prompt, prompt);
    app.stop().await;
}

#[tokio::test]
async fn compaction_brings_the_facts_of_a_running_session_up_to_date() {
    let llm = FakeLlm::start(memory_model).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_memory(s);
        s.context.keep_recent_turns = 1;
    })
    .await;

    let (session, _) = app.say_as("ada", "hello").await;
    app.say_as("ada", "remember: Ada likes tea.").await;
    app.say_as("ada", "tell me more").await;
    assert!(
        !last_system(&llm).contains("Ada likes tea"),
        "frozen until compaction"
    );
    let (_, compacted) = app.say_as("ada", "/compact").await;
    assert_eq!(
        compacted,
        "Older messages were summarised; the full history stays stored."
    );
    app.say_as("ada", "and now?").await;

    let prompt = last_system(&llm);
    assert!(prompt.contains(": Ada likes tea."), "{prompt}");
    assert_eq!(app.session_row(&session).await.system_prompt, prompt);
    app.stop().await;
}

#[tokio::test]
async fn refreshing_the_facts_at_compaction_keeps_the_tools_and_system_text_cached_on_anthropic() {
    let billing = switchboard_test_support::model::Caching::new();
    let llm = FakeLlm::builder(memory_model)
        .billing(billing.clone())
        .start()
        .await;
    let base = llm.anthropic_base();
    let app = TestApp::spawn_with(&llm, |s| {
        with_memory(s);
        s.context.keep_recent_turns = 1;
        s.llm.provider = switchboard::llm::ProviderKind::Anthropic;
        s.llm.base_url = switchboard::domain::BaseUrl::parse(&base).expect("a test URL");
        s.agent.persona = "You are a careful assistant who answers briefly. ".repeat(120);
    })
    .await;
    app.say_as("ada", "hello").await;
    app.say_as("ada", "remember: Ada likes tea.").await;
    app.say_as("ada", "tell me more").await;
    app.say_as("ada", "/compact").await;
    let before = llm.requests().len();

    app.say_as("ada", "and now?").await;

    let requests = llm.requests();
    let after = requests[before].json();
    let earlier = requests[before - 2].json();
    assert!(
        after["system"][1]["text"]
            .as_str()
            .is_some_and(|facts| facts.contains(": Ada likes tea.")),
        "the facts follow the stable text: {}",
        after["system"]
    );
    assert_eq!(after["system"][0], earlier["system"][0], "the stable text");
    let bill = billing.bills()[before];
    assert!(
        bill.cache_read_tokens >= 1024,
        "tools and system text read from the cache: {bill:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn compaction_can_extract_facts_from_a_direct_chat_and_never_from_a_group() {
    let llm = FakeLlm::start(memory_model).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_memory(s);
        s.context.keep_recent_turns = 1;
        s.memory.extract_at_compaction = true;
    })
    .await;
    let fake = Fake::register(&app);
    let extractions = |llm: &FakeLlm| {
        llm.requests()
            .iter()
            .filter(|r| is_extraction_request(&r.json()))
            .count()
    };

    for text in ["hi", "I am vegetarian", "we are planning a trip"] {
        fake.say(&app, "bob", "group-1", ChatKind::Group, text)
            .await;
    }
    let compacted = fake
        .say(&app, "bob", "group-1", ChatKind::Group, "/compact")
        .await;
    assert_eq!(
        compacted,
        "Older messages were summarised; the full history stays stored."
    );
    assert_eq!(extractions(&llm), 0, "a group chat is never read for facts");

    app.say_as("ada", "I am vegetarian, by the way").await;
    app.say_as("ada", "Lisbon is too hot in August").await;
    app.say_as("ada", "what about Porto?").await;
    let (_, compacted) = app.say_as("ada", "/compact").await;
    assert_eq!(
        compacted,
        "Older messages were summarised; the full history stays stored."
    );
    assert_eq!(extractions(&llm), 1);
    let asked = llm
        .requests()
        .into_iter()
        .find(|r| is_extraction_request(&r.json()))
        .expect("the extraction request")
        .json();
    let asked = asked["messages"][1]["content"].as_str().expect("text");
    assert!(asked.contains("I am vegetarian, by the way"), "{asked}");
    let (_, listed) = app.say_as("ada", "/memory").await;
    assert!(
        listed.contains(
            "1. The user is vegetarian.\n2. The user rejected Lisbon: too hot in August."
        ),
        "{listed}"
    );
    app.say_as("ada", "so where to?").await;
    assert!(last_system(&llm).contains(": The user is vegetarian."));
    app.stop().await;
}

#[tokio::test]
async fn with_memory_off_there_is_no_tool_no_facts_and_memory_says_so() {
    let llm = FakeLlm::start(memory_model).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_memory(s);
        s.memory.enabled = false;
    })
    .await;

    let (_, reply) = app.say_as("ada", "remember: Ada likes tea.").await;
    assert!(
        reply.starts_with("Refused: unknown tool `memory`"),
        "{reply}"
    );
    let tools = llm.requests()[0].json()["tools"].to_string();
    assert!(!tools.contains("\"memory\""), "{tools}");
    let (_, memory) = app.say_as("ada", "/memory").await;
    assert_eq!(memory, "Long-term memory is turned off on this assistant.");
    app.stop().await;
}
