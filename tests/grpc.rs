//! The gRPC frontend through a real socket: an in-process engine with the
//! tonic services on 127.0.0.1:0, driven by the generated tonic client.

use std::path::Path;

use trtis::core::repository::ControlMode;
use trtis::server::frontend::grpc::GrpcService;
use trtis::server::protocol::pb::health::{health_client::HealthClient, HealthCheckRequest};
use trtis::server::protocol::pb::inference::{
    grpc_inference_service_client::GrpcInferenceServiceClient,
    model_infer_request::InferInputTensor, model_infer_request::InferRequestedOutputTensor,
    InferParameter, InferTensorContents, ModelInferRequest, ModelMetadataRequest,
    ModelReadyRequest, ModelStatisticsRequest, ServerLiveRequest,
};

struct GrpcServer {
    runtime: tokio::runtime::Runtime,
    url: String,
}

impl GrpcServer {
    fn start(repo: &Path) -> GrpcServer {
        let (engine, runtime, listener) =
            crate::util::server::engine_on_a_port(repo, ControlMode::None, &[]);
        let url = format!("http://{}", listener.local_addr().unwrap());
        let service = GrpcService::new(engine);
        runtime.spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service.inference())
                .add_service(service.health())
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
        });
        GrpcServer { runtime, url }
    }

    fn client(&self) -> GrpcInferenceServiceClient<tonic::transport::Channel> {
        self.runtime
            .block_on(GrpcInferenceServiceClient::connect(self.url.clone()))
            .unwrap()
    }
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("ident");
    std::fs::create_dir_all(m.join("1")).unwrap();
    std::fs::write(m.join("1/.keep"), "").unwrap();
    std::fs::write(
        m.join("config.pbtxt"),
        "backend: \"identity\"\nmax_batch_size: 4\n\
         input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n\
         output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] label_filename: \"labels.txt\" } ]\n",
    )
    .unwrap();
    std::fs::write(m.join("labels.txt"), "a\nb\nc\n").unwrap();
    dir
}

fn request(values: &[i32], id: &str) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "ident".into(),
        id: id.into(),
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "INT32".into(),
            shape: vec![1, values.len() as i64],
            contents: Some(InferTensorContents {
                int_contents: values.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn health_metadata_infer_and_errors() {
    let repo = repo();
    let s = GrpcServer::start(repo.path());
    let mut c = s.client();
    let rt = &s.runtime;
    assert!(
        rt.block_on(c.server_live(ServerLiveRequest {}))
            .unwrap()
            .into_inner()
            .live
    );
    let ready = ModelReadyRequest {
        name: "ident".into(),
        version: "".into(),
    };
    assert!(
        rt.block_on(c.model_ready(ready))
            .unwrap()
            .into_inner()
            .ready
    );
    let meta = rt
        .block_on(c.model_metadata(ModelMetadataRequest {
            name: "ident".into(),
            version: "".into(),
        }))
        .unwrap()
        .into_inner();
    assert_eq!(meta.inputs[0].shape, vec![-1, -1]);
    assert_eq!(meta.platform, "identity");

    // Typed contents in, raw contents out.
    let out = rt
        .block_on(c.model_infer(request(&[4, 5, 6], "x")))
        .unwrap()
        .into_inner();
    assert_eq!(out.id, "x");
    let expected: Vec<u8> = [4i32, 5, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(out.raw_output_contents, vec![expected]);

    // Classification through an output parameter.
    let mut req = request(&[1, 9, 5], "");
    req.outputs.push(InferRequestedOutputTensor {
        name: "OUTPUT0".into(),
        parameters: [(
            "classification".to_string(),
            InferParameter {
                parameter_choice: Some(trtis::server::protocol::pb::inference::infer_parameter::ParameterChoice::Int64Param(2)),
            },
        )]
        .into_iter()
        .collect(),
    });
    let out = rt.block_on(c.model_infer(req)).unwrap().into_inner();
    assert_eq!(out.outputs[0].datatype, "BYTES");
    let strings = trtis::core::types::Tensor::bytes_elements(&out.raw_output_contents[0]).unwrap();
    assert_eq!(strings, vec![b"9:1:b".as_slice(), b"5:2:c".as_slice()]);

    let mut bad = request(&[1], "");
    bad.model_name = "missing".into();
    let err = rt.block_on(c.model_infer(bad)).unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_eq!(
        err.message(),
        "Request for unknown model: 'missing' is not found"
    );
    // Typed contents of another type than the datatype: Triton's message.
    let mut bad = request(&[1], "");
    bad.inputs[0].datatype = "FP32".into();
    let err = rt.block_on(c.model_infer(bad)).unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'ident' of type 'INT32', expected datatype 'FP32'"
    );
    // Raw contents of the wrong datatype reach the engine's check.
    let mut bad = request(&[1], "");
    bad.inputs[0].datatype = "FP32".into();
    bad.inputs[0].contents = None;
    bad.raw_input_contents = vec![1.0f32.to_le_bytes().to_vec()];
    let err = rt.block_on(c.model_infer(bad)).unwrap_err();
    assert!(
        err.message()
            .contains("data-type is 'FP32', but model 'ident' expects 'INT32'"),
        "{}",
        err.message()
    );

    let stats = rt
        .block_on(c.model_statistics(ModelStatisticsRequest {
            name: "ident".into(),
            version: "".into(),
        }))
        .unwrap()
        .into_inner();
    assert_eq!(stats.model_stats[0].inference_count, 2);

    let mut health = rt.block_on(HealthClient::connect(s.url.clone())).unwrap();
    let status = rt
        .block_on(health.check(HealthCheckRequest {
            service: String::new(),
        }))
        .unwrap()
        .into_inner();
    assert_eq!(status.status, 1, "SERVING");
}

#[test]
fn streaming_keeps_order_and_survives_errors() {
    let repo = repo();
    let s = GrpcServer::start(repo.path());
    let mut c = s.client();
    let mut requests = Vec::new();
    for i in 0..20 {
        let mut r = request(&[i], &format!("r{i}"));
        if i == 7 {
            r.inputs[0].name = "WRONG".into();
        }
        requests.push(r);
    }
    let responses: Vec<_> = s.runtime.block_on(async {
        let stream = c
            .model_stream_infer(tokio_stream::iter(requests))
            .await
            .unwrap()
            .into_inner();
        tokio_stream::StreamExt::collect::<Vec<_>>(stream).await
    });
    assert_eq!(responses.len(), 20);
    for (i, r) in responses.into_iter().enumerate() {
        let r = r.unwrap();
        let resp = r.infer_response.unwrap();
        assert_eq!(resp.id, format!("r{i}"));
        if i == 7 {
            assert_eq!(
                r.error_message,
                "unexpected inference input 'WRONG' for model 'ident'"
            );
        } else {
            assert_eq!(r.error_message, "");
            assert_eq!(
                resp.raw_output_contents[0],
                (i as i32).to_le_bytes().to_vec()
            );
        }
    }
}
