"""`RePoLightningModule`: OLMo-2 with any position method, trained as in the REPO paper.

Loss = next-token cross-entropy + z-loss (1e-5); AdamW (0.9, 0.95), eps 1e-8,
decoupled decay 0.1 except embeddings; linear decay to 0 without warm-up;
gradient clipping is the Trainer's (`gradient_clip_val: 1.0`, passed to
DeepSpeed's `gradient_clipping` too), and the gradient norm before it is
logged as `train/grad_norm`. The model is built in `configure_model`
so strategies can place it; `init_from` continues from an HF OLMo-2 directory
with fresh REPO weights.
"""

from __future__ import annotations

import importlib.util
import warnings

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.precision import Precision
from pytorch_lightning.utilities import GradClipAlgorithmType

from repo_train.checkpoints import MAX_STEPS_KEY
from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM, layer_policies
from repo_train.modeling.methods import resolve_position
from repo_train.modeling.position_config import PositionConfig
from repo_train.modeling.presets import preset
from repo_train.training.activation_checkpointing import checkpoint_plan, enable_activation_checkpointing
from repo_train.training.fsdp2 import clip_grad_norm, shard_model
from repo_train.training.objective import IGNORE_INDEX, check_loss_chunk_tokens, chunked_lm_loss, lm_loss, shift_labels
from repo_train.training.optim import build_adamw, linear_decay, set_fused
from repo_train.training.regional_compile import compile_decoder_layers


def resolve_attn_implementation(name: str) -> str:
    """ "auto" = flash-attn 2 when it is installed and CUDA is present, else SDPA."""
    if name != "auto":
        return name
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


# Overriding `configure_gradient_clipping` (to log the norm it computes) makes Lightning's DeepSpeed
# strategy warn that the hook "will not actually clip gradients". DeepSpeed still clips, with its own
# `gradient_clipping`, and the hook does nothing there (see the method), so the warning only misleads.
warnings.filterwarnings("ignore", message="Since DeepSpeed handles gradient clipping internally")


class NonFiniteLossError(RuntimeError):
    """The loss became NaN/inf; raised on every rank at once."""

    def __init__(self, step: int, loss: float):
        self.step = step
        super().__init__(
            f"non-finite loss ({loss}) at step {step}: training stopped before the update. Resume from the last "
            "checkpoint with a lower learning rate, or check the data around this step."
        )


def model_config_fields(hparams) -> dict:
    """The model-config fields a module's hyperparameters set (also for checks before training).

    The position's options replace a loaded model's (`init_from`); its layer plan's numbers left at None keep
    the loaded model's.
    """
    return {**dict(hparams.config_overrides or {}), **resolve_position(hparams.position).model_config_fields()}


class RePoLightningModule(pl.LightningModule):
    def __init__(
        self,
        init_from: str | None = None,
        preset_name: str = "tiny",
        position: PositionConfig | str = "repo",
        config_overrides: dict | None = None,
        lr: float = 3e-3,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        warmup_steps: int = 0,
        z_loss_multiplier: float = 1e-5,
        activation_checkpointing: bool | str = False,
        attn_implementation: str = "auto",
        loss_chunk_tokens: int = 0,
        fused_adamw: bool = False,
        compile: bool = False,
    ):
        """
        Args:
            init_from: HF directory to continue from (vanilla OLMo-2, this project's, or published RePo);
                None = train from scratch with `preset_name`.
            preset_name: model size when training from scratch: tiny (the id corpus's 256 ids), tiny-byte (the byte
                tokenizer's 258), olmo2-1b, olmo2-7b. With init_from the loaded model's size is used; a preset set
                too must have that size (checked before training).
            position: the position method and its options: a name (rope, nope, r2n1, n2r1, repo, or a registered
                policy's, with default options) or its config class (class_path + init_args), e.g.
                `RepoPosition` with start_layer, hidden_size (d_p) and the curriculum. Kept in config.json.
            config_overrides: any other RePoOlmo2Config field, e.g. rope_parameters for YaRN.
            lr: peak learning rate (REPO paper, 1B: 7.4487e-5).
            weight_decay: decoupled AdamW decay, not applied to embeddings.
            betas: AdamW betas.
            eps: AdamW epsilon.
            warmup_steps: linear warm-up steps before the linear decay (paper: 0).
            z_loss_multiplier: weight of the z-loss (OLMo: 1e-5).
            activation_checkpointing: recompute activations in backward to save memory: true (every decoder layer),
                false, every_K (every K-th layer), attention or mlp (that block of every layer); see
                training/activation_checkpointing.py.
            attn_implementation: auto (flash-attn when installed on CUDA, else sdpa), sdpa, eager, flash_attention_2.
            loss_chunk_tokens: tokens per chunk of the loss; 0 = the whole micro batch at once. With OLMo-2's
                100,352-id vocabulary a 4×4,096 micro batch's float32 logits alone are 6.1 GiB (16,384 × 100,352 ×
                4 bytes), and the whole-batch loss keeps two such tensors for backward. With N > 0 the loss is taken
                N target tokens at a time from the decoder's hidden states and backward recomputes each chunk's
                logits, so one chunk's exist at a time (N = 4,096: 1.5 GiB), for one more lm_head matmul per token
                (about 5% more compute for OLMo-2 1B). Same loss and gradients up to float rounding.
            fused_adamw: torch's fused AdamW kernel (CPU and CUDA) instead of its per-tensor update; same update up
                to float rounding. Under DeepSpeed ZeRO-2 this same torch optimizer steps each process's fp32
                partition (zero2.json has no `optimizer` section, so Lightning hands DeepSpeed this one), so the
                switch holds under every strategy here. A resume may turn it on or off.
            compile: torch.compile each decoder layer in place (training/regional_compile.py).
        """
        super().__init__()
        checkpoint_plan(activation_checkpointing)  # a value it does not know fails here, in one line
        # Saved as a plain {class_path, init_args} mapping, as LightningCLI's config.yaml has it: checkpoints then
        # load with weights_only=True. An unknown name or option fails here, before anything is written.
        position = resolve_position(position).to_config()
        check_loss_chunk_tokens(loss_chunk_tokens)
        self.save_hyperparameters()
        self.model: RePoOlmo2ForCausalLM | None = None
        self.stopped_on_nonfinite = False
        self.last_train_loss: torch.Tensor | None = None  # unscaled by gradient accumulation

    # ----------------------------------------------------------------- model
    def model_config_fields(self) -> dict:
        return model_config_fields(self.hparams)

    def model_config(self) -> RePoOlmo2Config:
        """The config the model will have, without building weights (for checks before training)."""
        if self.model is not None:
            return self.model.config
        hp = self.hparams
        if hp.init_from:
            return RePoOlmo2Config.from_pretrained(hp.init_from, **self.model_config_fields())
        return preset(hp.preset_name, **self.model_config_fields())

    def configure_model(self) -> None:
        if self.model is not None:
            return
        hp = self.hparams
        attn = resolve_attn_implementation(hp.attn_implementation)
        if hp.init_from:
            model = RePoOlmo2ForCausalLM.from_pretrained(
                hp.init_from, attn_implementation=attn, dtype=torch.float32, **self.model_config_fields()
            )
        else:
            config = preset(hp.preset_name, **self.model_config_fields())
            config._attn_implementation = attn
            model = RePoOlmo2ForCausalLM(config)
        enable_activation_checkpointing(model, hp.activation_checkpointing)
        if hp.compile:  # after checkpointing, so each layer's graph holds its checkpoint
            compile_decoder_layers(model)
        model.config.use_cache = False
        model.train()  # from_pretrained returns eval mode; Lightning would otherwise warn that modules are in eval
        if self.device_mesh is not None:  # ModelParallelStrategy: FSDP2, after activation checkpointing
            shard_model(model, self.device_mesh["data_parallel"], self.trainer.precision)
        self.model = model

    # -------------------------------------------------------------- training
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits

    def _losses(self, batch):
        input_ids = batch["input_ids"]
        if "labels" in batch:  # the data chose which tokens carry a loss (e.g. completions only)
            labels = torch.full_like(input_ids, IGNORE_INDEX)
            labels[:, :-1] = batch["labels"][:, 1:]
        else:
            labels = shift_labels(input_ids, self.model.config.pad_token_id)
        chunk = self.hparams.loss_chunk_tokens
        if chunk:  # the causal LM's forward is decoder + lm_head; the head is applied chunk by chunk here
            hidden = self.model.model(input_ids=input_ids, use_cache=False).last_hidden_state
            return chunked_lm_loss(hidden, self.model.lm_head, labels, chunk, self.hparams.z_loss_multiplier)
        return lm_loss(self(input_ids), labels, self.hparams.z_loss_multiplier)

    def on_train_batch_start(self, batch, batch_idx):
        """Each layer's policy schedule (`PositionPolicy.on_train_step`), its values logged as train/NAME."""
        logged: dict[str, float] = {}
        for policy in layer_policies(self.model):
            logged.update(policy.on_train_step(self.global_step))
        for name, value in logged.items():
            self.log(f"train/{name}", value)

    def training_step(self, batch, batch_idx):
        parts = self._losses(batch)
        finite = bool(torch.isfinite(parts.total).all())
        if not self.trainer.strategy.reduce_boolean_decision(finite, all=True):
            # Every rank agrees, so every rank stops here, before backward and the update: the
            # weights and the last checkpoint are the last good state.
            self.stopped_on_nonfinite = True
            raise NonFiniteLossError(self.global_step, float(parts.total.detach()))
        self.last_train_loss = parts.total.detach()
        self.log("train/loss", self.last_train_loss, prog_bar=True)
        self.log("train/ce", parts.ce)
        self.log("train/z_loss", parts.z)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], prog_bar=True)
        return parts.total

    def validation_step(self, batch, batch_idx):
        parts = self._losses(batch)
        self.log("val/loss", parts.total, prog_bar=True, sync_dist=True)
        self.log("val/ce", parts.ce, sync_dist=True)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        """The Trainer's gradient clipping, logging the total gradient norm before it as `train/grad_norm`.

        Clipping by norm computes that norm anyway: `clip_grad_norm_` (what
        Lightning calls) returns it, so one pass over the gradients both clips
        and logs. Without clipping, or clipping by value, the norm is computed
        on its own first. DeepSpeed still calls this hook but owns the
        (partitioned) gradients and clips inside its step (`gradient_clipping`);
        the throughput callback logs the norm DeepSpeed computed.
        """
        if getattr(self.trainer.strategy, "strategy_name", "") in ("deepspeed", "deepspeed_cpu"):
            return
        plugin = self.trainer.precision_plugin
        if (
            isinstance(gradient_clip_val, (int, float))
            and gradient_clip_val > 0
            and gradient_clip_algorithm in (None, GradClipAlgorithmType.NORM)
            and type(plugin).clip_grad_by_norm is Precision.clip_grad_by_norm  # Lightning's own is this call
        ):
            norm = clip_grad_norm(plugin.main_params(optimizer), gradient_clip_val)  # FSDP2's DTensors too
            if norm is not None:
                self.log("train/grad_norm", norm)
            return
        norm = clip_grad_norm(self.parameters(), None)
        if norm is not None:
            self.log("train/grad_norm", norm)
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self):
        hp = self.hparams
        total = self.trainer.max_steps
        if total is None or total < 1:
            raise ValueError("set trainer.max_steps (the linear decay reaches 0 there), e.g. --trainer.max_steps 23842")
        optimizer = build_adamw(self.model, hp.lr, hp.weight_decay, tuple(hp.betas), hp.eps, fused=hp.fused_adamw)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_decay(total, hp.warmup_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_train_start(self) -> None:
        self.apply_optimizer_hparams()

    def apply_optimizer_hparams(self) -> None:
        """Make the optimizer and the schedule use this module's lr, betas, eps, weight decay and fused_adamw.

        On a fresh run they already do. On a resume Lightning restores the
        checkpoint's optimizer and scheduler state, values included; the
        training command refuses given values that differ from the
        checkpoint's unless `--allow_hparam_changes true`, and then they must
        win: this writes them over the restored ones (only where they differ,
        so a plain resume stays bit-exact).
        """
        hp = self.hparams
        for optimizer in self.trainer.optimizers:
            groups = optimizer.param_groups
            if groups and groups[0].get("weight_decay") != hp.weight_decay:
                groups[0]["weight_decay"] = hp.weight_decay  # the decayed group; embeddings (group 1) stay at 0
            for group in groups:
                if "betas" in group and list(group["betas"]) != list(hp.betas):
                    group["betas"] = tuple(hp.betas)
                if "eps" in group and group["eps"] != hp.eps:
                    group["eps"] = hp.eps
            set_fused(optimizer, hp.fused_adamw)
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR) or scheduler.base_lrs == [hp.lr] * len(
                scheduler.base_lrs
            ):
                continue
            scheduler.base_lrs = [hp.lr] * len(scheduler.base_lrs)
            groups = scheduler.optimizer.param_groups
            for group, factor in zip(groups, scheduler.lr_lambdas, strict=True):
                group["initial_lr"] = hp.lr
                group["lr"] = hp.lr * factor(scheduler.last_epoch)
            scheduler._last_lr = [group["lr"] for group in groups]

    # ----------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint):
        checkpoint["model_config"] = self.model.config.to_dict()
        trainer = self._trainer
        if trainer is not None:  # the run's total, so an export can say whether these weights finished it
            checkpoint[MAX_STEPS_KEY] = trainer.max_steps

    def on_load_checkpoint(self, checkpoint):
        self.configure_model()
