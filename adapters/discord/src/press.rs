//! An `INTERACTION_CREATE` payload → the contract's [`InboundAction`]. Pure.
//!
//! Only the fields used are read, and any may be missing: a payload the
//! adapter cannot use is still answered (see [`crate::interaction`]). A press
//! is an interaction of type 3 (MESSAGE_COMPONENT) on a button (component
//! type 2) whose `custom_id` is a valid [`ActionId`]. The event id is the
//! interaction id, the chat the channel (a DM when there is no guild;
//! threads are chats of their own, as for messages), the presser `member.user`
//! in a server and `user` in a DM, and `message_id` the message the button
//! is under.

use serde::Deserialize;
use serenity::model::id::{ApplicationId, ChannelId, GuildId, InteractionId, MessageId, UserId};
use switchboard_contract::{
    AccountId, ActionId, ChatId, ChatKind, EventId, InboundAction, PlatformName, Sender,
    UserId as ContractUserId,
};

use crate::normalise::PLATFORM;

/// Discord's interaction type of a press on a message component.
const MESSAGE_COMPONENT: u8 = 3;
/// Discord's component type of a button.
const BUTTON: u8 = 2;

/// The parts of an interaction the adapter reads. The token answers the
/// interaction (for 15 minutes): never logged, so no `Debug`.
#[derive(Deserialize)]
pub(crate) struct Interaction {
    pub id: InteractionId,
    pub application_id: ApplicationId,
    #[serde(rename = "type")]
    pub kind: u8,
    pub token: String,
    pub channel_id: Option<ChannelId>,
    pub guild_id: Option<GuildId>,
    pub member: Option<Member>,
    pub user: Option<User>,
    pub data: Option<Data>,
    pub message: Option<Pressed>,
}

#[derive(Deserialize)]
pub(crate) struct Member {
    pub user: Option<User>,
    pub nick: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct User {
    pub id: UserId,
    #[serde(default)]
    pub username: String,
    pub global_name: Option<String>,
    #[serde(default)]
    pub bot: bool,
}

#[derive(Deserialize)]
pub(crate) struct Data {
    pub custom_id: Option<String>,
    pub component_type: Option<u8>,
}

/// The message the component is on.
#[derive(Deserialize)]
pub(crate) struct Pressed {
    pub id: MessageId,
}

/// Why an interaction is not a press for the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotOurs {
    /// Not a button press (a slash command, a select menu…).
    NotAButton,
    /// A `custom_id` that is not an action id.
    NoAction,
    /// No channel or no user to say where and who.
    Incomplete,
    /// An id Discord sent does not make a valid identifier.
    InvalidId,
}

/// The press `interaction` as an action of `account`.
///
/// # Errors
/// Why it is not one of the core's presses.
pub(crate) fn action(
    interaction: &Interaction,
    account: &AccountId,
) -> Result<InboundAction, NotOurs> {
    let data = interaction.data.as_ref().ok_or(NotOurs::NotAButton)?;
    if interaction.kind != MESSAGE_COMPONENT || data.component_type != Some(BUTTON) {
        return Err(NotOurs::NotAButton);
    }
    let action = data
        .custom_id
        .as_deref()
        .and_then(|id| ActionId::parse(id).ok())
        .ok_or(NotOurs::NoAction)?;
    let channel = interaction.channel_id.ok_or(NotOurs::Incomplete)?;
    let member = interaction.member.as_ref();
    let user = member
        .and_then(|member| member.user.as_ref())
        .or(interaction.user.as_ref())
        .ok_or(NotOurs::Incomplete)?;
    let display_name = member
        .and_then(|member| member.nick.clone())
        .or_else(|| user.global_name.clone())
        .or_else(|| Some(user.username.clone()).filter(|name| !name.is_empty()));
    let invalid = |_| NotOurs::InvalidId;
    Ok(InboundAction {
        platform: PlatformName::parse(PLATFORM).map_err(invalid)?,
        account: account.clone(),
        event_id: EventId::parse(interaction.id.to_string()).map_err(invalid)?,
        chat: ChatId::parse(channel.to_string()).map_err(invalid)?,
        chat_kind: if interaction.guild_id.is_some() {
            ChatKind::Group
        } else {
            ChatKind::Direct
        },
        thread: None,
        sender: Sender {
            id: ContractUserId::parse(user.id.to_string()).map_err(invalid)?,
            display_name,
            is_bot: user.bot,
        },
        action,
        message_id: interaction.message.as_ref().map(|m| m.id.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn press(custom_id: &str) -> Value {
        json!({
            "id": "1200000000000000001", "application_id": "900000000000000001",
            "type": 3, "token": "secret-token", "version": 1,
            "channel_id": "1100000000000000001", "guild_id": "700000000000000001",
            "member": {"nick": "Ally", "user": {"id": "800000000000000001", "username": "alice"}},
            "data": {"custom_id": custom_id, "component_type": 2},
            "message": {"id": "1000000000000000009", "channel_id": "1100000000000000001"},
        })
    }

    fn parsed(value: Value) -> Interaction {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_button_press_in_a_server_is_an_action_in_its_channel() {
        let account = AccountId::parse("900000000000000001").unwrap();
        let action = action(&parsed(press("ap:3:deny")), &account).unwrap();
        assert_eq!(action.action.as_str(), "ap:3:deny");
        assert_eq!(action.event_id.as_str(), "1200000000000000001");
        assert_eq!(action.chat.as_str(), "1100000000000000001");
        assert_eq!(action.chat_kind, ChatKind::Group);
        assert_eq!(action.sender.id.as_str(), "800000000000000001");
        assert_eq!(action.sender.display_name.as_deref(), Some("Ally"));
        assert_eq!(action.message_id.as_deref(), Some("1000000000000000009"));
    }

    #[test]
    fn a_press_in_a_dm_names_its_user() {
        let mut dm = press("ap:3:once");
        dm.as_object_mut().unwrap().remove("guild_id");
        dm.as_object_mut().unwrap().remove("member");
        dm["user"] = json!({"id": "800000000000000002", "username": "bob", "global_name": "Bob"});
        let account = AccountId::parse("1").unwrap();
        let action = action(&parsed(dm), &account).unwrap();
        assert_eq!(action.chat_kind, ChatKind::Direct);
        assert_eq!(action.sender.id.as_str(), "800000000000000002");
        assert_eq!(action.sender.display_name.as_deref(), Some("Bob"));
    }

    #[test]
    fn other_interactions_are_not_the_cores() {
        let account = AccountId::parse("1").unwrap();
        let forged = parsed(press("has space"));
        assert_eq!(action(&forged, &account).err(), Some(NotOurs::NoAction));
        let mut select = press("ap:1:x");
        select["data"]["component_type"] = json!(3);
        assert_eq!(
            action(&parsed(select), &account).err(),
            Some(NotOurs::NotAButton)
        );
        let mut command = press("ap:1:x");
        command["type"] = json!(2);
        assert_eq!(
            action(&parsed(command), &account).err(),
            Some(NotOurs::NotAButton)
        );
        let mut nobody = press("ap:1:x");
        nobody.as_object_mut().unwrap().remove("member");
        assert_eq!(
            action(&parsed(nobody), &account).err(),
            Some(NotOurs::Incomplete)
        );
    }
}
