//! A model's opt-in to the OpenAI-compatible API (`server::frontend::openai`),
//! read from its config's `parameters` and checked with the rest of the
//! config, so `validate-config` and `serve` agree:
//!
//! | key | value |
//! |---|---|
//! | `openai_text_input` | the BYTES input the prompt goes to (required to opt in) |
//! | `openai_text_output` | the BYTES output the text comes from: `/v1/completions`, `/v1/chat/completions` |
//! | `openai_chat_template` | a Jinja file in the model's directory that makes the chat messages one prompt (`/v1/chat/completions`) |
//! | `openai_embedding_output` | the FP32 output holding the input's embedding: `/v1/embeddings` |
//!
//! Chat templates are rendered as Hugging Face renders them (`trim_blocks`,
//! `lstrip_blocks`, Python's string methods, `raise_exception`) by
//! `minijinja`, with `messages` and `add_generation_prompt` set. Token
//! counts come from the outputs `num_input_tokens` / `num_output_tokens`
//! when the model has them, as in Triton's OpenAI frontend.

use std::path::Path;

use crate::core::config::pb::{DataType as ConfigType, ModelConfig};

/// The config keys this module reads; any other `openai_*` key is refused.
pub const KEYS: [&str; 4] = [
    "openai_text_input",
    "openai_text_output",
    "openai_chat_template",
    "openai_embedding_output",
];

/// What a model serves of the OpenAI API.
#[derive(Debug, Clone)]
pub struct OpenAiModel {
    pub text_input: String,
    /// Completions and chat.
    pub text_output: Option<String>,
    /// Chat.
    pub chat_template: Option<ChatTemplate>,
    /// Embeddings.
    pub embedding_output: Option<String>,
    /// The model reports token counts (`num_input_tokens`,
    /// `num_output_tokens` outputs).
    pub counts_tokens: bool,
}

/// A chat template: its file's name and the template, compiled once at
/// load (a request only renders it).
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    pub file: String,
    /// Holds the template as `TEMPLATE`.
    env: minijinja::Environment<'static>,
}

/// The template's name in its environment.
const TEMPLATE: &str = "chat";

/// A problem with a model's `openai_*` parameters: the key and what is
/// wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub key: String,
    pub message: String,
}

fn err(key: &str, message: String) -> SpecError {
    SpecError {
        key: key.to_string(),
        message,
    }
}

impl OpenAiModel {
    /// The model's opt-in (`None`: it has none), its tensors checked
    /// against the config and its template read from `model_dir` and
    /// compiled.
    pub fn from_config(config: &ModelConfig, model_dir: &Path) -> Result<Option<Self>, SpecError> {
        let param = |key: &str| {
            config
                .parameters
                .get(key)
                .map(|p| p.string_value.trim().to_string())
        };
        for key in config.parameters.keys() {
            if key.starts_with("openai_") && !KEYS.contains(&key.as_str()) {
                return Err(err(
                    key,
                    format!(
                        "unknown OpenAI API parameter '{key}': the keys are {}",
                        KEYS.join(", ")
                    ),
                ));
            }
        }
        let Some(text_input) = param("openai_text_input") else {
            if let Some(key) = KEYS.iter().find(|k| config.parameters.contains_key(**k)) {
                return Err(err(
                    key,
                    format!("'{key}' needs 'openai_text_input', the BYTES input the text goes to"),
                ));
            }
            return Ok(None);
        };
        let input = config.input.iter().find(|i| i.name == text_input);
        match input {
            None => {
                return Err(err(
                    "openai_text_input",
                    format!(
                    "openai_text_input names '{text_input}', which is not an input of the model"
                ),
                ))
            }
            Some(i) if i.data_type != ConfigType::TypeString as i32 => {
                return Err(err(
                    "openai_text_input",
                    format!("openai_text_input '{text_input}' must be a TYPE_STRING input"),
                ))
            }
            Some(_) => {}
        }
        let output =
            |key: &str, want: ConfigType, what: &str| -> Result<Option<String>, SpecError> {
                let Some(name) = param(key) else {
                    return Ok(None);
                };
                match config.output.iter().find(|o| o.name == name) {
                    None => Err(err(
                        key,
                        format!("{key} names '{name}', which is not an output of the model"),
                    )),
                    Some(o) if o.data_type != want as i32 => {
                        Err(err(key, format!("{key} '{name}' must be a {what} output")))
                    }
                    Some(_) => Ok(Some(name)),
                }
            };
        let text_output = output("openai_text_output", ConfigType::TypeString, "TYPE_STRING")?;
        let embedding_output =
            output("openai_embedding_output", ConfigType::TypeFp32, "TYPE_FP32")?;
        if text_output.is_none() && embedding_output.is_none() {
            return Err(err(
                "openai_text_input",
                "an OpenAI model needs 'openai_text_output' (completions, chat) or 'openai_embedding_output' (embeddings)".to_string(),
            ));
        }
        let chat_template = match param("openai_chat_template") {
            None => None,
            Some(_) if text_output.is_none() => {
                return Err(err(
                    "openai_chat_template",
                    "a chat template needs 'openai_text_output' too".to_string(),
                ))
            }
            Some(file) => Some(ChatTemplate::read(model_dir, &file)?),
        };
        let counts_tokens = ["num_input_tokens", "num_output_tokens"]
            .iter()
            .all(|n| config.output.iter().any(|o| o.name == *n));
        Ok(Some(OpenAiModel {
            text_input,
            text_output,
            chat_template,
            embedding_output,
            counts_tokens,
        }))
    }
}

impl ChatTemplate {
    fn read(model_dir: &Path, file: &str) -> Result<Self, SpecError> {
        let key = "openai_chat_template";
        let relative = Path::new(file);
        if relative.is_absolute()
            || relative
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(err(
                key,
                format!("chat template '{file}' must be a path inside the model's directory"),
            ));
        }
        let source = crate::core::fsutil::read_regular_to_string(&model_dir.join(relative))
            .map_err(|e| {
                err(
                    key,
                    format!("cannot read chat template '{file}' in the model's directory: {e}"),
                )
            })?;
        let mut env = Self::environment();
        env.add_template_owned(TEMPLATE, source).map_err(|e| {
            err(
                key,
                format!("chat template '{file}' does not compile: {e:#}"),
            )
        })?;
        Ok(ChatTemplate {
            file: file.to_string(),
            env,
        })
    }

    /// Jinja as Hugging Face sets it up for chat templates.
    fn environment() -> minijinja::Environment<'static> {
        let mut env = minijinja::Environment::new();
        if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
        {
            env.set_syntax(syntax);
        }
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    message,
                ))
            },
        );
        env
    }

    /// The prompt for `messages` (the request's, as JSON), ending with the
    /// assistant's turn (`add_generation_prompt`).
    pub fn render(&self, messages: &serde_json::Value) -> Result<String, String> {
        self.env
            .get_template(TEMPLATE)
            .and_then(|template| {
                template.render(minijinja::context! {
                    messages => minijinja::Value::from(minijinja::value::Serde(messages)),
                    add_generation_prompt => true,
                })
            })
            .map_err(|e| format!("chat template '{}': {e}", self.file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(params: &str) -> ModelConfig {
        let text = format!(
            r#"name: "m" backend: "python"
               input [ {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
                       {{ name: "n" data_type: TYPE_INT32 dims: [ 1 ] }} ]
               output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }},
                        {{ name: "embedding" data_type: TYPE_FP32 dims: [ 4 ] }} ]
               {params}"#
        );
        crate::core::config::parse_config(text.as_bytes())
            .unwrap()
            .config
    }

    fn p(k: &str, v: &str) -> String {
        format!(r#"parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}"#)
    }

    #[test]
    fn opt_in_and_its_checks() {
        let dir = tempfile::tempdir().unwrap();
        assert!(OpenAiModel::from_config(&config(""), dir.path())
            .unwrap()
            .is_none());
        let m = OpenAiModel::from_config(
            &config(
                &(p("openai_text_input", "text_input") + &p("openai_text_output", "text_output")),
            ),
            dir.path(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(m.text_output.as_deref(), Some("text_output"));
        assert!(!m.counts_tokens);
        let e =
            |params: String| OpenAiModel::from_config(&config(&params), dir.path()).unwrap_err();
        assert_eq!(
            e(p("openai_text_output", "text_output")).key,
            "openai_text_output"
        );
        assert!(
            e(p("openai_text_input", "n") + &p("openai_text_output", "text_output"))
                .message
                .contains("must be a TYPE_STRING input")
        );
        assert!(e(
            p("openai_text_input", "text_input") + &p("openai_embedding_output", "text_output")
        )
        .message
        .contains("must be a TYPE_FP32 output"));
        assert!(e(p("openai_text_input", "text_input"))
            .message
            .contains("needs 'openai_text_output'"));
        assert!(
            e(p("openai_text_input", "text_input") + &p("openai_text_outptu", "x"))
                .message
                .contains("unknown OpenAI API parameter 'openai_text_outptu'")
        );
        let chat = p("openai_text_input", "text_input")
            + &p("openai_text_output", "text_output")
            + &p("openai_chat_template", "t.jinja");
        assert!(e(chat.clone())
            .message
            .contains("cannot read chat template 't.jinja'"));
        std::fs::write(dir.path().join("t.jinja"), "{% for m in messages %}").unwrap();
        assert!(e(chat.clone()).message.contains("does not compile"));
    }

    #[test]
    fn renders_as_hugging_face_does() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t.jinja"),
            "{% for m in messages %}\n  {% if m['role'] == 'tool' %}{{ raise_exception('no tools') }}{% endif %}\n<|{{ m.role }}|>{{ m['content'].strip() }}\n{% endfor %}\n{% if add_generation_prompt %}<|assistant|>{% endif %}",
        )
        .unwrap();
        let t = ChatTemplate::read(dir.path(), "t.jinja").unwrap();
        let prompt = t
            .render(&serde_json::json!([
                {"role": "system", "content": " Be brief. "},
                {"role": "user", "content": "Hi"}
            ]))
            .unwrap();
        assert_eq!(prompt, "<|system|>Be brief.\n<|user|>Hi\n<|assistant|>");
        let e = t
            .render(&serde_json::json!([{"role": "tool", "content": "x"}]))
            .unwrap_err();
        assert!(e.contains("no tools"), "{e}");
        assert!(ChatTemplate::read(dir.path(), "../t.jinja").is_err());
    }
}
