# ruff: noqa
# fmt: off
# Source: parlai 1.7.2 (PyPI sdist), parlai/core/torch_generator_agent.py, lines
# 27-48, 501-529, 1202-1300, 1392-1477, 1555-1658 and 1973-2075, abridged (docstrings, other search
# options and the verbose token details cut). With `--fp16` ParlAI runs `model.half()`, and the
# decoder's scores reach the searches as `F.log_softmax(score, dtype=torch.float32)`.
# False positive (review 4): the samplers' `softmax`, `log` and `multinomial` were read as half. The
# searches get their scores through `b.advance(score[i], _ts)`, a call on an object of the file's
# class, and the n-gram blocker is a module kept by a plain object, which no cast of the model reaches.
# expect-none: AMP003,AMP013
import torch
import torch.nn as nn
import torch.nn.functional as F
from parlai.ops.ngram_repeat_block import NGramRepeatBlock
import parlai.utils.fsdp as fsdp_utils
from parlai.core.opt import Opt


class TorchGeneratorAgent:
    def __init__(self, opt: Opt, shared=None):
            self.model = self.build_model()
            with fsdp_utils.maybe_fsdp_wrap(opt):
                self.model = fsdp_utils.fsdp_wrap(self.model)
                if self.fp16 and not fsdp_utils.delay_halving(opt):
                    self.model = self.model.half()

    def _generation_activation(self, score: torch.Tensor) -> torch.float32:
        return F.log_softmax(score, dim=-1, dtype=torch.float32)

    def _generate(self, batch, beam_size, max_ts, prefix_tokens=None):
        model = self.model
        encoder_states = model.encoder(*self._encoder_input(batch))
        dev = batch.text_vec.device
        bsz = batch.batchsize
        beams = [
            self._treesearch_factory(dev, verbose=self.show_token_details)
            for _ in range(bsz)
        ]
        decoder_input = self._get_initial_decoder_input(bsz, beam_size, dev)
        incr_state = None

        for _ts in range(max_ts):
            if all((b.is_done() for b in beams)):
                # exit early if possible
                break

            score, incr_state = model.decoder(decoder_input, encoder_states, incr_state)
            # only need the final hidden state to make the word prediction
            score = score[:, -1:, :]
            score = model.output(score)
            # score contains softmax scores for bsz * beam_size samples
            score = score.view(bsz, beam_size, -1)
            if self.temperature != 1.0:
                score.div_(self.temperature)
            # force to fp32 to avoid overflow issues during search calculations
            score = self._generation_activation(score)  # type: ignore
            for i, b in enumerate(beams):
                if not b.is_done():
                    b.advance(score[i], _ts)


class TreeSearch(object):
    def __init__(self, beam_size, block_ngram=-1, gpu_beam_blocking=False):
        self.beam_size = beam_size
        self.block_ngram = block_ngram
        self.block_list = None
        self.scores = None
        self.gpu_beam_blocking = gpu_beam_blocking and torch.cuda.is_available()
        self.partial_hyps = torch.tensor([[self.bos] for i in range(beam_size)])
        if self.gpu_beam_blocking:
            self.partial_hyps = self.partial_hyps.cuda()
            self.no_repeat_ngram_op = NGramRepeatBlock()

    def _block_ngrams(
        self,
        ngram_size: int,
        logprobs: torch.Tensor,
        step: int = 0,
        if_context_blocking=False,
    ):
        # gpu beam blocking
        if self.gpu_beam_blocking:
            context = self.context if if_context_blocking else None
            logprobs = self.no_repeat_ngram_op(
                hypothesis=self.partial_hyps,
                context=context,
                lprobs=logprobs,
                bsz=1,
                step=step,
                beam_size=self.beam_size,
                no_repeat_ngram_size=ngram_size,
                if_context_blocking=if_context_blocking,
            )
            return logprobs

        # cpu beam blocking
        for beam_id, hyp in enumerate(self.partial_hyps.tolist()):
            if len(hyp) < ngram_size - 1:
                continue
            source = hyp if if_context_blocking is False else self.context
            prefix = hyp[-(ngram_size - 1) :]
            for i in range(len(source) - ngram_size + 1):
                ngram = source[i : i + ngram_size]
                if ngram_size == 1 or prefix == ngram[:-1]:
                    logprobs[beam_id][ngram[-1]] = neginf(logprobs.dtype)
        return logprobs

    def _block_block_list(self, logprobs: torch.Tensor) -> torch.Tensor:
        if self.block_list is None:
            return logprobs

        for beam_id, hyp in enumerate(self.partial_hyps.tolist()):
            for ngram_size, bad_ngrams in self.block_list.items():
                prefix = hyp[-(ngram_size - 1) :]
                for ngram in bad_ngrams:
                    if (ngram_size == 1) or prefix == ngram[:-1]:
                        logprobs[beam_id][ngram[-1]] = neginf(logprobs.dtype)
        return logprobs

    def advance(self, logprobs, step):
        current_length = len(self.all_scores) - 1
        if self.scores is None:
            self.scores = torch.zeros(1).type_as(logprobs).to(logprobs.device)

        # beam blocking
        if self.block_ngram > 0:
            # self blocking
            logprobs = self._block_ngrams(
                ngram_size=self.block_ngram,
                logprobs=logprobs,
                step=step,
                if_context_blocking=False,
            )

        logprobs = self._block_block_list(logprobs)

        path_selection = self.select_paths(logprobs, self.scores, current_length)
        self.scores = path_selection.scores


class TopKSampling(TreeSearch):
    def __init__(self, k, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.k = k

    def select_paths(self, logprobs, prior_scores, current_length):
        values, indices = logprobs.topk(self.k, dim=-1)
        probs = torch.softmax(values, dim=-1)
        choices = torch.multinomial(probs, 1)[:, 0]
        hyp_ids = torch.arange(logprobs.size(0)).to(logprobs.device)
        tok_ids = indices[hyp_ids, choices]
        scores = values[hyp_ids, choices]
        best_scores = prior_scores.expand_as(scores) + scores

        if self.verbose:
            tok_logprobs = probs[hyp_ids, choices].log().view(-1).cpu().numpy()
        return hyp_ids, tok_ids, best_scores


class NucleusSampling(TreeSearch):
    def __init__(self, p, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.p = p

    def get_mask(self, sorted_probs: torch.Tensor) -> torch.Tensor:
        return (sorted_probs.cumsum(dim=-1) - sorted_probs) >= self.p

    def select_paths(self, logprobs, prior_scores, current_length):
        # Unlike the other treesearch methods, we have to switch to linspace
        # for the probabilities in order to compute the CDF.
        probs = torch.softmax(logprobs, dim=-1)
        sprobs, sinds = probs.sort(dim=-1, descending=True)
        # The subtraction here is to get the exclusive prefix sum,
        # to guarantee the first element is not masked
        mask = self.get_mask(sprobs)
        trunc_sprobs = sprobs.detach().clone()
        trunc_sprobs[mask] = 0
        trunc_sprobs.div_(trunc_sprobs.sum(dim=-1).unsqueeze(1))
        choices = torch.multinomial(trunc_sprobs, 1)[:, 0]
        hyp_ids = torch.arange(logprobs.size(0)).to(logprobs.device)
        tok_ids = sinds[hyp_ids, choices]
        # Convert back to logspace.
        scores = trunc_sprobs[hyp_ids, choices].log()
        best_scores = prior_scores.expand_as(scores) + scores

        if self.verbose:
            tok_logprobs = sprobs[hyp_ids, choices].log().view(-1).cpu().numpy()
        return hyp_ids, tok_ids, best_scores
