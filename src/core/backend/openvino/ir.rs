//! An OpenVINO IR's inputs and outputs read from its `model.xml` without
//! OpenVINO (so `validate-config` checks a config as a load does, and
//! `gen-config` writes one): each `Parameter` layer is an input, named by
//! its output port's tensor names (`names="..."`, the first one; else the
//! layer's name); each `Result` layer is an output, named by the tensor
//! names of the port that feeds it (through the `<edges>`). Types come from
//! the ports' `precision`, shapes from their `<dim>`s (-1 dynamic).
//! Hand-written over quick-xml: the IR is a plain XML document and there is
//! no crate for it.

use std::collections::HashMap;

use openvino::ElementType;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::Dim;
use crate::core::error::{Error, Result};

/// One input or output of the IR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrPort {
    pub name: String,
    pub element: Option<ElementType>,
    /// -1: dynamic.
    pub dims: Vec<i64>,
    /// The port's layout (`rt_info`'s `layout` attribute, e.g. `[N,C,H,W]`),
    /// which auto-complete reads for batching; none in most IRs.
    pub layout: Option<String>,
}

impl IrPort {
    /// The port as the load's checks see a model's (an unknown precision
    /// as a dynamic type, which they refuse).
    pub(super) fn port(&self) -> super::Port {
        super::Port {
            name: self.name.clone(),
            element: self.element.unwrap_or(ElementType::Dynamic),
            dims: self.dims(),
        }
    }

    fn dims(&self) -> Vec<Dim> {
        self.dims.iter().map(|&d| Dim::from_config(d)).collect()
    }
}

/// A port's `precision` attribute as an element type.
fn element_of(precision: &str) -> Option<ElementType> {
    Some(match precision.to_ascii_uppercase().as_str() {
        "BOOL" | "BOOLEAN" => ElementType::Boolean,
        "U8" => ElementType::U8,
        "U16" => ElementType::U16,
        "U32" => ElementType::U32,
        "U64" => ElementType::U64,
        "I8" => ElementType::I8,
        "I16" => ElementType::I16,
        "I32" => ElementType::I32,
        "I64" => ElementType::I64,
        "FP16" | "F16" => ElementType::F16,
        "BF16" => ElementType::Bf16,
        "FP32" | "F32" => ElementType::F32,
        "FP64" | "F64" => ElementType::F64,
        _ => return None,
    })
}

#[derive(Default)]
struct Port {
    names: Option<String>,
    precision: Option<String>,
    dims: Vec<i64>,
    layout: Option<String>,
}

#[derive(Default)]
struct Layer {
    id: String,
    name: String,
    kind: String,
    inputs: Vec<(String, Port)>,
    outputs: Vec<(String, Port)>,
}

fn attr(e: &BytesStart, key: &str) -> Option<String> {
    e.try_get_attribute(key).ok().flatten().and_then(|a| {
        a.normalized_value(quick_xml::XmlVersion::default())
            .ok()
            .map(|v| v.into_owned())
    })
}

/// The IR's inputs and outputs, in the model's order.
pub fn read(xml: &str) -> Result<(Vec<IrPort>, Vec<IrPort>)> {
    let bad = |why: String| Error::invalid_arg(format!("openvino error in reading model : {why}"));
    let mut reader = Reader::from_str(xml);
    reader.config_mut().trim_text(true);
    let mut layers: Vec<Layer> = Vec::new();
    let mut edges: HashMap<(String, String), (String, String)> = HashMap::new();
    let mut layer: Option<Layer> = None;
    // Where a <port> goes: true for <output>.
    let mut in_output = false;
    let mut port: Option<(String, Port)> = None;
    let mut in_dim = false;
    let mut depth_layers = false;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| bad(format!("not an IR XML document: {e}")))?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(event, Event::Empty(_));
                match e.local_name().as_ref() {
                    b"layers" => depth_layers = !empty,
                    b"layer" if depth_layers => {
                        let l = Layer {
                            id: attr(e, "id").unwrap_or_default(),
                            name: attr(e, "name").unwrap_or_default(),
                            kind: attr(e, "type").unwrap_or_default(),
                            ..Default::default()
                        };
                        if empty {
                            layers.push(l);
                        } else {
                            layer = Some(l);
                        }
                    }
                    b"input" => in_output = false,
                    b"output" => in_output = true,
                    b"port" if layer.is_some() => {
                        let p = (
                            attr(e, "id").unwrap_or_default(),
                            Port {
                                names: attr(e, "names"),
                                precision: attr(e, "precision"),
                                dims: Vec::new(),
                                layout: None,
                            },
                        );
                        if empty {
                            if let Some(l) = layer.as_mut() {
                                if in_output {
                                    l.outputs.push(p);
                                } else {
                                    l.inputs.push(p);
                                }
                            }
                        } else {
                            port = Some(p);
                        }
                    }
                    b"dim" => in_dim = !empty,
                    // <rt_info><attribute name="layout" layout="[N,C]"/> in a port.
                    b"attribute" if attr(e, "name").as_deref() == Some("layout") => {
                        if let Some((_, p)) = port.as_mut() {
                            p.layout = attr(e, "layout").or_else(|| attr(e, "value"));
                        }
                    }
                    b"edge" => {
                        let get = |k| attr(e, k).unwrap_or_default();
                        edges.insert(
                            (get("to-layer"), get("to-port")),
                            (get("from-layer"), get("from-port")),
                        );
                    }
                    _ => {}
                }
            }
            Event::Text(t) if in_dim => {
                let text = t.decode().map_err(|e| bad(e.to_string()))?;
                let d: i64 = text
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("a <dim> of '{text}'")))?;
                if let Some((_, p)) = port.as_mut() {
                    p.dims.push(d);
                }
            }
            Event::End(e) => match e.local_name().as_ref() {
                b"dim" => in_dim = false,
                b"port" => {
                    if let (Some(p), Some(l)) = (port.take(), layer.as_mut()) {
                        if in_output {
                            l.outputs.push(p);
                        } else {
                            l.inputs.push(p);
                        }
                    }
                }
                b"layer" => {
                    if let Some(l) = layer.take() {
                        layers.push(l);
                    }
                }
                b"layers" => depth_layers = false,
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    if layers.is_empty() {
        return Err(bad("the document has no <layers>".into()));
    }
    let first_name = |p: &Port, fallback: &str| -> String {
        p.names
            .as_deref()
            .and_then(|n| n.split(',').map(str::trim).find(|n| !n.is_empty()))
            .map_or_else(|| fallback.to_string(), str::to_string)
    };
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for l in &layers {
        match l.kind.as_str() {
            "Parameter" => {
                let (_, p) = l.outputs.first().ok_or_else(|| {
                    bad(format!("Parameter layer '{}' has no output port", l.name))
                })?;
                inputs.push(IrPort {
                    name: first_name(p, &l.name),
                    element: p.precision.as_deref().and_then(element_of),
                    dims: p.dims.clone(),
                    layout: p.layout.clone(),
                });
            }
            "Result" => {
                let (port_id, p) = l
                    .inputs
                    .first()
                    .ok_or_else(|| bad(format!("Result layer '{}' has no input port", l.name)))?;
                let (from_layer, from_port) = edges
                    .get(&(l.id.clone(), port_id.clone()))
                    .ok_or_else(|| bad(format!("Result layer '{}' has no edge into it", l.name)))?;
                let producer = layers
                    .iter()
                    .find(|x| &x.id == from_layer)
                    .and_then(|x| x.outputs.iter().find(|(id, _)| id == from_port))
                    .map(|(_, p)| p);
                let name = producer
                    .and_then(|p| p.names.as_ref().map(|_| first_name(p, "")))
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| {
                        bad(format!(
                            "the output of Result layer '{}' has no tensor name (unnamed outputs are not supported)",
                            l.name
                        ))
                    })?;
                outputs.push(IrPort {
                    name,
                    element: producer
                        .and_then(|p| p.precision.as_deref())
                        .or(p.precision.as_deref())
                        .and_then(element_of),
                    dims: p.dims.clone(),
                    layout: p
                        .layout
                        .clone()
                        .or_else(|| producer.and_then(|p| p.layout.clone())),
                });
            }
            _ => {}
        }
    }
    if outputs.is_empty() {
        return Err(bad("the IR has no Result layer".into()));
    }
    Ok((inputs, outputs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_irs_are_read() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openvino");
        let xml = std::fs::read_to_string(dir.join("add_sub/model.xml")).unwrap();
        let (inputs, outputs) = read(&xml).unwrap();
        let names = |ps: &[IrPort]| ps.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&inputs), ["INPUT0", "INPUT1"]);
        assert_eq!(names(&outputs), ["OUTPUT0", "OUTPUT1"]);
        assert_eq!(inputs[0].dims, [-1, 4]);
        assert_eq!(inputs[0].element, Some(ElementType::F32));
        assert_eq!(outputs[1].element, Some(ElementType::F32));
        let xml = std::fs::read_to_string(dir.join("add_sub_fixed/model.xml")).unwrap();
        assert_eq!(read(&xml).unwrap().0[1].dims, [2, 4]);
        assert!(read("<net><nothing/></net>").is_err());
        assert!(read("not xml <<<").is_err());
    }
}
