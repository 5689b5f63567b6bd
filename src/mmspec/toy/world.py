"""The toy world: synthetic 32x32 images of coloured shapes, and conversations about them.

A scene holds 1..4 objects, each a (colour, shape) in its own corner of the image. All text is
lower-case words and the punctuation tokens "," "." "?" ":", separated by single spaces, so a
word-level tokenizer over VOCABULARY covers it. Objects are always listed in canonical order:
top left, top right, bottom left, bottom right.

Scenarios (one dataset each, see DATASETS):
- toy_caption: one image, "describe the image ." -> "a red circle at the top left , a blue
  square at the bottom right ."
- toy_vqa: one image, one question about the colour of a shape, the shape in a corner, or the
  corner of an object, answered by a full sentence ("the circle is red .").
- toy_diff: two images (before, after) differing by one change: an object recoloured, moved to
  an empty corner, appeared or disappeared; "what changed ?" -> "a green square appeared at the
  bottom left ."
- toy_multiturn: turn 0 is a caption; turn 1 is one of three follow-up kinds (TABED's second
  turns), drawn uniformly:
  "prior": text only, answerable from the turn-0 caption alone (how many shapes, list the
  colours, list the shapes);
  "image": brings a new image (a new scene) and asks the caption prompt or a toy_vqa question
  about it, so the turn-1 row carries two images and the answer is about the second;
  "text": text only, unrelated to any image, with a fixed answer: colour mixing ("what colour
  do red and blue make ?" -> "red and blue make purple .") or sides ("how many sides does a
  triangle have ?" -> "a triangle has three sides .").
- toy_story: five images of one object walking between corners; "tell the story ." -> "first a
  red circle is at the top left . then it moves to the top right . ... finally it moves to ..."
  Out of distribution for drafts trained on single images; after the first sentence the text is
  largely predictable from text alone.
- toy_video: eight frames of one or two objects, each staying put or moving 1..3 times between
  corners; "describe the motion ." -> "the red circle moves from the top left to the top right ,
  then to the bottom right . the blue square stays at the bottom left ." Many visual tokens (8 x
  16), long answers whose predictable stretches ("then to the") alternate with the hard words
  (which corner next), the setting of the video papers' pruning and adaptive trees.
- toy_vdesc: toy_video's kind of video (four frames, each object moving at most once) described
  in detail, as video description benchmarks (VDD, VDC) answer: "describe the video in detail ."
  -> "the clip shows the red circle and the blue square . the camera is still . the red circle
  moves from ... . meanwhile , the blue square stays at ... . the mood is calm and the pace is
  slow . nothing else happens ." The list and the motion sentences carry the visual content; the
  rest is grammar and filler sentences (about 75% of the tokens, as LVSpec's Section 2 measures
  for real descriptions) whose words are choices among synonyms that say nothing about the video:
  uniform in the dataset, mostly a model's own word when it is trained in a house style
  (HOUSE_STYLES).
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from functools import lru_cache
from itertools import combinations
from typing import NamedTuple

import numpy as np

from mmspec.data import media

COLOURS = ["red", "green", "blue", "yellow", "purple", "orange"]
SHAPES = ["circle", "square", "triangle"]
POSITIONS = ["top left", "top right", "bottom left", "bottom right"]  # canonical order
NUMBERS = ["one", "two", "three", "four"]
KINDS = [(colour, shape) for colour in COLOURS for shape in SHAPES]
CORNER_SETS = [list(combinations(POSITIONS, n)) for n in range(1, 5)]  # by size, canonical order

RGB = {
    "red": (230, 40, 40),
    "green": (40, 200, 60),
    "blue": (40, 90, 240),
    "yellow": (240, 220, 40),
    "purple": (160, 60, 210),
    "orange": (250, 140, 20),
}

SIZE = 32  # image side in pixels
QUAD = SIZE // 2  # each corner is a 16x16 quadrant

# Prompts, fixed so that a word-level tokenizer sees a closed vocabulary.
CAPTION_PROMPT = "describe the image ."
DIFF_PROMPT = "what changed ?"
STORY_PROMPT = "tell the story ."
VIDEO_PROMPT = "describe the motion ."
VIDEO_FRAMES = 8
# toy_vdesc's videos are shorter: with a single move per object, four frames show it, and a
# target trains on them in about 60% of the time eight frames take (docs/toy-world.md, "Video
# descriptions": what teaches the models to read a move is toy_video in their training mix, not
# the frame count)
VDESC_FRAMES = 4
VDESC_PROMPT = "describe the video in detail ."
# toy_vdesc's fillers: sentences that say nothing about the video, each {slot} a choice among
# synonyms (any mix of choices is a sentence, as synonyms are in real descriptions) and each
# [word] an optional word, one more in the sentence, shifting the words after it
FILLERS = {
    # the list ("the red circle and the blue square") is the video's
    "opener": "the {video} {shows} {list} .",
    "setting": "the {camera} is {still} .",
    "connector": "{meanwhile} , [then]",  # before the second object's sentence
    "mood": "the {mood} is {calm} and [also] the {pace} is {slow} .",
    "closer": "{nothing} {else} {happens} .",
}
SYNONYMS = {
    "video": ["video", "clip", "film"],
    "shows": ["shows", "has", "holds"],
    "camera": ["camera", "view", "frame"],
    "still": ["still", "fixed", "steady"],
    "meanwhile": ["meanwhile", "also", "next"],
    "mood": ["mood", "tone", "feel"],
    "calm": ["calm", "quiet", "gentle"],
    "pace": ["pace", "tempo", "speed"],
    "slow": ["slow", "easy", "even"],
    "nothing": ["nothing", "little"],
    "else": ["else", "more"],
    "happens": ["happens", "occurs"],
}
# A house style: which synonym a model's training descriptions prefer in every slot. Two models
# trained on corpora of different styles say the same content in other words where it does not
# matter, as a small draft and its large target do (toy recipe key `vdesc_style`).
HOUSE_STYLES = {"a": 0, "b": 1}
# whether a house style writes the optional [words] (LVSpec's Section 3.3, case 1: a draft that
# adds a word, so that the words after it come one position late)
HOUSE_INSERTS = {"a": False, "b": True}
# whether a house style lists two shapes against the order its motion sentences take them (the
# video's: by starting corner), None for either order: LVSpec's Section 3.3, case 2, a draft that
# names the same things in another order, so that the target's next word is a few words further
# on in the draft. Style a (the preset's target) lists in either order: trained to list in the
# motion order, a target that went on from the draft's reversed list named the list's first
# colour in its first motion sentence, a shortcut its own lists taught it (docs/toy-world.md).
HOUSE_LISTS_REVERSED = {"a": None, "b": True}
# the words a style chooses (synonym slots and optional words): what a description written in
# another style says differently, and nothing a motion sentence or the list uses
STYLE_WORDS = frozenset(
    [w for words in SYNONYMS.values() for w in words]
    + [w[1:-1] for t in FILLERS.values() for w in t.split() if w.startswith("[")]
)
# how often a style with an order lists in it: 90%, so that it has seen the other order too.
# The list's articles are "the": "a" / "an" would give the next colour's first letter away, a
# word that names nothing visual yet fixes a visual one
LIST_PREFERENCE = 0.9
# the data's top-3 entropy at a slot is then about 0.035 nats: a habit the model is sure of
# (LVSpec's "low-entropy non-synonyms", which an entropy gate keeps strict down to the loosest
# gate of its Figure 7, 0.05; at a 99% habit, 0.06 nats, that gate opened on the fillers)
STYLE_PREFERENCE = 0.995
# colour names that annotators mix up (toy recipe key `vdesc_colour_noise`: the share of training
# descriptions' colour words that name the near colour instead)
NEAR_COLOURS = {
    "red": "orange",
    "orange": "red",
    "yellow": "orange",
    "green": "yellow",
    "blue": "purple",
    "purple": "blue",
}
COUNT_PROMPT = "how many shapes are there ?"
COLOURS_PROMPT = "list the colours ."
SHAPES_PROMPT = "list the shapes ."
MIXES = {  # primary pairs -> the colour they make, for the text-only reasoning turns
    ("red", "blue"): "purple",
    ("red", "yellow"): "orange",
    ("blue", "yellow"): "green",
}
SIDES = {"triangle": "three", "square": "four"}  # a circle has none: never asked

# Every word any prompt or answer can contain, plus the chat words "user" "assistant" ":".
_TEXT_WORDS = """
a an the at is are it to and from there , . ? :
describe image what colour colours shape shapes where changed became moved appeared disappeared
how many list tell story first then moves finally user assistant
do does make has have sides
motion stays
"""
_POSITION_WORDS = ["top", "bottom", "left", "right"]
# toy_vdesc's words, after the others so that their ids stay as they were
_DESCRIPTION_WORDS = ["in", "video", "detail"] + [w for words in SYNONYMS.values() for w in words]
VOCABULARY: list[str] = list(
    dict.fromkeys(
        _TEXT_WORDS.split() + COLOURS + SHAPES + _POSITION_WORDS + NUMBERS + _DESCRIPTION_WORDS
    )
)
# the words that state what the video shows (the rest of an answer is grammar and filler):
# toy_vdesc's oracle split of visual-relevant tokens
VISUAL_WORDS = frozenset(COLOURS + SHAPES + _POSITION_WORDS + NUMBERS + ["moves", "stays"])


class Obj(NamedTuple):
    colour: str
    shape: str
    pos: str  # one of POSITIONS


Scene = tuple[Obj, ...]  # objects in canonical position order, at most one per corner


class Turn(NamedTuple):
    scenes: list  # the images of this turn's user message, as scenes
    question: str
    answer: str
    video: bool = False  # the scenes are the frames of one video


# ---------------------------------------------------------------------------------------------
# rendering


def _shape_masks() -> dict[str, np.ndarray]:
    """Boolean 16x16 masks of each shape, about 12 px across, centred in the quadrant."""
    y, x = np.mgrid[0:QUAD, 0:QUAD] + 0.5  # pixel centres
    c = QUAD / 2
    circle = (y - c) ** 2 + (x - c) ** 2 <= 6.0**2
    square = (np.abs(y - c) <= 5) & (np.abs(x - c) <= 5)  # a bit smaller: same area as circle
    # apex at the top (row 2), base at the bottom (row 14), half-width growing to 6
    half_width = (y - 2) / 12 * 6
    triangle = (y >= 2) & (y <= 14) & (np.abs(x - c) <= half_width)
    return {"circle": circle, "square": square, "triangle": triangle}


def _tiles() -> dict[tuple[str, str], np.ndarray]:
    """A 16x16 RGB tile per (colour, shape), precomputed so rendering is just copying tiles."""
    masks = _shape_masks()
    return {
        (colour, shape): masks[shape][:, :, None] * np.array(RGB[colour], dtype=np.uint8)
        for colour in COLOURS
        for shape in SHAPES
    }


TILES = _tiles()
CORNERS = {pos: ((i // 2) * QUAD, (i % 2) * QUAD) for i, pos in enumerate(POSITIONS)}  # (row, col)


def render(scene: Scene) -> np.ndarray:
    """The scene as a 32x32x3 uint8 RGB image: flat-coloured shapes on black."""
    img = np.zeros((SIZE, SIZE, 3), dtype=np.uint8)
    for obj in scene:
        r, c = CORNERS[obj.pos]
        img[r : r + QUAD, c : c + QUAD] = TILES[obj.colour, obj.shape]
    return img


MASKS = _shape_masks()
SHADE = 24.0  # std of an object's colour shift per channel (0-255), in image generation
GRAIN = 20.0  # std of per-pixel noise, in image generation


def render_textured(scene: Scene, rng: np.random.Generator) -> np.ndarray:
    """The scene as an image generator draws it: each shape in its colour shifted by a random
    shade, every pixel with grain. One caption then has many images, so a generator's next-code
    distributions spread over similar codes, as a real visual AR model's do."""
    img = np.zeros((SIZE, SIZE, 3), dtype=np.float32)
    for obj in scene:
        r, c = CORNERS[obj.pos]
        shade = np.asarray(RGB[obj.colour], dtype=np.float32) + rng.normal(0, SHADE, 3)
        img[r : r + QUAD, c : c + QUAD][MASKS[obj.shape]] = shade
    img += rng.normal(0, GRAIN, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).round().astype(np.uint8)


@lru_cache(maxsize=1 << 16)
def _scene_png(scene: Scene) -> tuple[bytes, str]:
    # scenes repeat a lot (story frames, small scenes), so encode each once
    png = media.png_bytes(render(scene))
    return png, media.image_id(png)


# ---------------------------------------------------------------------------------------------
# scenes and phrases


def _pick(rng: np.random.Generator, items: list):
    return items[int(rng.integers(len(items)))]


def random_scene(rng: np.random.Generator) -> Scene:
    """1..4 random objects in distinct corners, in canonical order."""
    corners = _pick(rng, CORNER_SETS[_pick(rng, [0, 1, 2, 3])])  # uniform count, then corners
    kinds = rng.integers(len(KINDS), size=len(corners))  # few rng calls: each costs microseconds
    return tuple(Obj(*KINDS[k], pos) for k, pos in zip(kinds, corners, strict=True))


def _sorted(objs) -> Scene:
    return tuple(sorted(objs, key=lambda o: POSITIONS.index(o.pos)))


def _empty_corners(scene: Scene) -> list[str]:
    taken = {o.pos for o in scene}
    return [p for p in POSITIONS if p not in taken]


def _listing(words: list[str]) -> str:
    """'red', 'red and blue', 'red , green and blue'."""
    if len(words) == 1:
        return words[0]
    return " , ".join(words[:-1]) + " and " + words[-1]


def article(colour: str) -> str:
    return "an" if colour[0] in "aeiou" else "a"  # "an orange circle"


def caption(scene: Scene) -> str:
    objs = [f"{article(o.colour)} {o.colour} {o.shape} at the {o.pos}" for o in scene]
    return " , ".join(objs) + " ."


# ---------------------------------------------------------------------------------------------
# scenarios: each make_<scenario>(rng) returns the turns of one sample


def make_toy_caption(rng: np.random.Generator) -> list[Turn]:
    scene = random_scene(rng)
    return [Turn([scene], CAPTION_PROMPT, caption(scene))]


def _applicable(rng: np.random.Generator, kind: Callable) -> tuple[Scene, tuple]:
    """Draw scenes until `kind` applies to one; picking the kind first keeps kinds uniform."""
    while True:
        scene = random_scene(rng)
        if (out := kind(scene, rng)) is not None:
            return scene, out


def _vqa_colour(scene: Scene, rng) -> tuple[str, str] | None:
    counts = Counter(o.shape for o in scene)
    objs = [o for o in scene if counts[o.shape] == 1]  # "the circle" must be unambiguous
    if not objs:
        return None
    o = _pick(rng, objs)
    return f"what colour is the {o.shape} ?", f"the {o.shape} is {o.colour} ."


def _vqa_shape(scene: Scene, rng) -> tuple[str, str] | None:
    o = _pick(rng, list(scene))
    return f"what shape is at the {o.pos} ?", f"a {o.shape} is at the {o.pos} ."


def _vqa_position(scene: Scene, rng) -> tuple[str, str] | None:
    counts = Counter((o.colour, o.shape) for o in scene)
    objs = [o for o in scene if counts[o.colour, o.shape] == 1]
    if not objs:
        return None
    o = _pick(rng, objs)
    return f"where is the {o.colour} {o.shape} ?", f"the {o.colour} {o.shape} is at the {o.pos} ."


VQA_KINDS = [_vqa_colour, _vqa_shape, _vqa_position]


def make_toy_vqa(rng: np.random.Generator) -> list[Turn]:
    scene, qa = _applicable(rng, _pick(rng, VQA_KINDS))
    return [Turn([scene], *qa)]


def _diff_recolour(scene: Scene, rng) -> tuple[Scene, str] | None:
    o = _pick(rng, list(scene))
    new = _pick(rng, [c for c in COLOURS if c != o.colour])
    after = _sorted([x if x != o else o._replace(colour=new) for x in scene])
    return after, f"the {o.colour} {o.shape} at the {o.pos} became {new} ."


def _diff_move(scene: Scene, rng) -> tuple[Scene, str] | None:
    empty = _empty_corners(scene)
    if not empty:
        return None
    o, to = _pick(rng, list(scene)), _pick(rng, empty)
    after = _sorted([x if x != o else o._replace(pos=to) for x in scene])
    return after, f"the {o.colour} {o.shape} moved from the {o.pos} to the {to} ."


def _diff_appear(scene: Scene, rng) -> tuple[Scene, str] | None:
    empty = _empty_corners(scene)
    if not empty:
        return None
    o = Obj(_pick(rng, COLOURS), _pick(rng, SHAPES), _pick(rng, empty))
    answer = f"{article(o.colour)} {o.colour} {o.shape} appeared at the {o.pos} ."
    return _sorted(scene + (o,)), answer


def _diff_disappear(scene: Scene, rng) -> tuple[Scene, str] | None:
    if len(scene) < 2:  # the after image keeps at least one object
        return None
    o = _pick(rng, list(scene))
    after = tuple(x for x in scene if x != o)
    return after, f"the {o.colour} {o.shape} at the {o.pos} disappeared ."


DIFF_KINDS = [_diff_recolour, _diff_move, _diff_appear, _diff_disappear]


def make_toy_diff(rng: np.random.Generator) -> list[Turn]:
    before, (after, answer) = _applicable(rng, _pick(rng, DIFF_KINDS))
    return [Turn([before, after], DIFF_PROMPT, answer)]


def _follow_up(scene: Scene, rng) -> tuple[str, str]:
    """A text-only question about the caption of `scene`, answerable from the caption alone."""
    kind = int(rng.integers(3))
    if kind == 0:
        n = len(scene)
        if n == 1:
            return COUNT_PROMPT, "there is one shape ."
        return COUNT_PROMPT, f"there are {NUMBERS[n - 1]} shapes ."
    attr, prompt = [("colour", COLOURS_PROMPT), ("shape", SHAPES_PROMPT)][kind - 1]
    words = list(dict.fromkeys(getattr(o, attr) for o in scene))  # distinct, in caption order
    if len(words) == 1:
        return prompt, f"the {attr} is {words[0]} ."
    return prompt, f"the {attr}s are {_listing(words)} ."


def _new_image_turn(rng: np.random.Generator) -> Turn:
    """A turn bringing a new image: the caption prompt or a toy_vqa question about it."""
    kind = int(rng.integers(1 + len(VQA_KINDS)))  # caption, colour, shape, position
    if kind == 0:
        scene = random_scene(rng)
        return Turn([scene], CAPTION_PROMPT, caption(scene))
    scene, qa = _applicable(rng, VQA_KINDS[kind - 1])
    return Turn([scene], *qa)


def _reasoning(rng: np.random.Generator) -> tuple[str, str]:
    """A text-only question unrelated to any image, with a fixed answer."""
    if int(rng.integers(2)) == 0:
        (a, b), mixed = _pick(rng, list(MIXES.items()))
        if int(rng.integers(2)):
            a, b = b, a  # either order
        return f"what colour do {a} and {b} make ?", f"{a} and {b} make {mixed} ."
    shape = _pick(rng, list(SIDES))
    return f"how many sides does a {shape} have ?", f"a {shape} has {SIDES[shape]} sides ."


FOLLOW_UP_KINDS = ["prior", "image", "text"]


def make_toy_multiturn(rng: np.random.Generator) -> list[Turn]:
    """A caption, then a follow-up of a kind drawn uniformly from FOLLOW_UP_KINDS."""
    scene = random_scene(rng)
    first = Turn([scene], CAPTION_PROMPT, caption(scene))
    kind = FOLLOW_UP_KINDS[int(rng.integers(len(FOLLOW_UP_KINDS)))]
    if kind == "prior":
        return [first, Turn([], *_follow_up(scene, rng))]
    if kind == "image":
        return [first, _new_image_turn(rng)]
    return [first, Turn([], *_reasoning(rng))]


def make_toy_story(rng: np.random.Generator, n_frames: int = 5) -> list[Turn]:
    colour, shape = _pick(rng, COLOURS), _pick(rng, SHAPES)
    walk = [_pick(rng, POSITIONS)]
    for _ in range(n_frames - 1):
        walk.append(_pick(rng, [p for p in POSITIONS if p != walk[-1]]))
    sentences = [f"first {article(colour)} {colour} {shape} is at the {walk[0]} ."]
    sentences += [f"then it moves to the {p} ." for p in walk[1:-1]]
    sentences.append(f"finally it moves to the {walk[-1]} .")
    scenes = [(Obj(colour, shape, p),) for p in walk]
    return [Turn(scenes, STORY_PROMPT, " ".join(sentences))]


def _video_paths(starts, moves: list[set[int]], n_frames: int, rng) -> list[list[str]]:
    """Each object's corner in each frame: it starts at its corner and, at each of its move
    frames, goes to a corner that no object held in the previous frame nor has taken in this one
    (with two objects, two such corners are always left)."""
    paths = [[start] for start in starts]
    for frame in range(1, n_frames):
        before = {path[-1] for path in paths}
        taken = set(before)
        for path, frames in zip(paths, moves, strict=True):
            here = path[-1]
            if frame in frames:
                here = _pick(rng, [p for p in POSITIONS if p not in taken])
                taken.add(here)
            path.append(here)
    return paths


def motion(colour: str, shape: str, path: list[str]) -> str:
    """ "the red circle moves from the top left to the top right , then to ... ." or "... stays"."""
    stops = [p for k, p in enumerate(path) if k == 0 or p != path[k - 1]]
    if len(stops) == 1:
        return f"the {colour} {shape} stays at the {stops[0]} ."
    hops = " , then to the ".join(stops[1:])
    return f"the {colour} {shape} moves from the {stops[0]} to the {hops} ."


def make_toy_video(
    rng: np.random.Generator, n_frames: int = VIDEO_FRAMES, most_moves: int = 3
) -> list[Turn]:
    n_objects = 1 + int(rng.integers(2))
    kinds = rng.choice(len(KINDS), size=n_objects, replace=False)
    starts = _pick(rng, CORNER_SETS[n_objects - 1])  # distinct corners, canonical order
    moves = [  # 0 (stays) .. most_moves move frames per object
        set(
            rng.choice(
                np.arange(1, n_frames), size=int(rng.integers(most_moves + 1)), replace=False
            ).tolist()
        )
        for _ in starts
    ]
    paths = _video_paths(starts, moves, n_frames, rng)
    objs = [KINDS[k] for k in kinds]
    scenes = [
        _sorted(Obj(c, s, path[f]) for (c, s), path in zip(objs, paths, strict=True))
        for f in range(n_frames)
    ]
    answer = " ".join(motion(c, s, path) for (c, s), path in zip(objs, paths, strict=True))
    return [Turn(scenes, VIDEO_PROMPT, answer, video=True)]


def make_toy_vdesc(
    rng: np.random.Generator,
    n_frames: int = VDESC_FRAMES,
    style: str | None = None,
    colour_noise: float = 0.0,
) -> list[Turn]:
    """A toy_video video of `n_frames` whose objects move at most once, and its detailed
    description: filler sentences (FILLERS) around the motion sentences (the description, not the
    tracking, is what this scenario is about: the toy models read a single move far more
    reliably than three).
    The opener lists the shapes, in either order (uniform), or as a house `style` lists them
    (HOUSE_LISTS_REVERSED, LIST_PREFERENCE); synonyms and optional words are uniform choices, or
    follow the style (HOUSE_STYLES, HOUSE_INSERTS). With `colour_noise` (training descriptions
    only) each motion sentence, and the list with it, names the near colour (NEAR_COLOURS) with
    that probability (unless an object of the video has the near colour), as annotators disagree
    on colour names: a model trained on them is unsure of the colour word even where it sees the
    colour."""
    (video,) = make_toy_video(rng, n_frames, most_moves=1)
    motions = [s.strip() + " ." for s in video.answer.split(" .") if s.strip()]
    if colour_noise:
        shown = {obj.colour for obj in video.scenes[0]}
        motions = [_renamed_colour(rng, m, colour_noise, shown) for m in motions]
    shapes = [" ".join(m.split()[1:3]) for m in motions]  # "red circle", as the sentence names it
    if len(shapes) == 2:
        habit = None if style is None else HOUSE_LISTS_REVERSED[style]
        if habit is None:
            reverse = rng.random() < 0.5
        else:
            reverse = habit if rng.random() < LIST_PREFERENCE else not habit
        shapes = shapes[::-1] if reverse else shapes
    listed = " and ".join(f"the {s}" for s in shapes)

    def filler(name: str) -> str:
        return _filler(rng, FILLERS[name], style).replace("{list}", listed)

    parts = [filler("opener"), filler("setting"), motions[0]]
    parts += [f"{filler('connector')} {m}" for m in motions[1:]]
    parts += [filler("mood"), filler("closer")]
    return [Turn(video.scenes, VDESC_PROMPT, " ".join(parts), video=True)]


def _renamed_colour(rng: np.random.Generator, sentence: str, noise: float, shown: set) -> str:
    """A motion sentence ("the red circle ...") naming the near colour with probability `noise`,
    unless the video shows an object of that colour: an annotator who sees a red and an orange
    object side by side tells them apart (else a model learns to name both alike)."""
    words = sentence.split()
    if rng.random() < noise and NEAR_COLOURS[words[1]] not in shown:
        words[1] = NEAR_COLOURS[words[1]]
    return " ".join(words)


def _filler(rng: np.random.Generator, template: str, style: str | None) -> str:
    """A filler sentence: each synonym slot uniform, or the style's own word with
    STYLE_PREFERENCE and another otherwise (so a model of that style still knows the others);
    each optional word in half the sentences, or as the style's habit (HOUSE_INSERTS) with
    STYLE_PREFERENCE."""
    words = []
    for word in template.split():
        if word.startswith("["):
            if style is None:
                keep = 0.5
            else:
                keep = STYLE_PREFERENCE if HOUSE_INSERTS[style] else 1 - STYLE_PREFERENCE
            if rng.random() < keep:
                words.append(word[1:-1])
            continue
        slot = word[1:-1] if word.startswith("{") else None
        if slot not in SYNONYMS:
            words.append(word)
        elif style is None:
            words.append(_pick(rng, SYNONYMS[slot]))
        else:
            own = SYNONYMS[slot][HOUSE_STYLES[style]]
            if rng.random() < STYLE_PREFERENCE:
                words.append(own)
            else:
                words.append(_pick(rng, [w for w in SYNONYMS[slot] if w != own]))
    return " ".join(words)


def patch_words(scene: Scene, patch: int) -> list[set[str]]:
    """What each of an image's `patch` x `patch` patches shows, in a vision tower's order
    (row-major): the colour, shape and corner words of the object in its quadrant; empty for
    background."""
    side = SIZE // patch
    words: list[set[str]] = [set() for _ in range(side * side)]
    for obj in scene:
        r, c = (x // patch for x in CORNERS[obj.pos])
        for dr in range(QUAD // patch):
            for dc in range(QUAD // patch):
                words[(r + dr) * side + c + dc] = {obj.colour, obj.shape, *obj.pos.split()}
    return words


def video_patch_words(scenes: list[Scene], patch: int) -> list[set[str]]:
    """patch_words of every frame in order, each object's patches also naming its motion
    ("moves" if it changes corner during the video, else "stays")."""
    corners: dict[tuple[str, str], set[str]] = {}
    for scene in scenes:
        for obj in scene:
            corners.setdefault((obj.colour, obj.shape), set()).add(obj.pos)
    out = []
    for scene in scenes:
        frame = patch_words(scene, patch)
        for obj in scene:
            verb = "moves" if len(corners[obj.colour, obj.shape]) > 1 else "stays"
            for words in frame:
                if obj.colour in words and obj.shape in words:
                    words.add(verb)
        out.extend(frame)
    return out


def visual_share(text: str) -> float:
    """The share of a text's tokens that state visual content (VISUAL_WORDS)."""
    words = text.split()
    return sum(w in VISUAL_WORDS for w in words) / len(words) if words else 0.0


DATASETS: dict[str, Callable[[np.random.Generator], list[Turn]]] = {
    "toy_caption": make_toy_caption,
    "toy_vqa": make_toy_vqa,
    "toy_diff": make_toy_diff,
    "toy_multiturn": make_toy_multiturn,
    "toy_story": make_toy_story,
    "toy_video": make_toy_video,
    "toy_vdesc": make_toy_vdesc,
}


# ---------------------------------------------------------------------------------------------
# conversations and rows


def _user(turn: Turn) -> dict:
    if turn.video:
        visual = [media.video_item(len(turn.scenes))]
    else:
        visual = [{"type": "image"} for _ in turn.scenes]
    content = visual + [{"type": "text", "text": turn.question}]
    return {"role": "user", "content": content}


def _assistant(turn: Turn) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": turn.answer}]}


def conversation(turns: list[Turn], upto: int, answer_last: bool) -> list[dict]:
    """Chat messages of turns 0..upto: earlier turns in full, the last one answered or not."""
    messages = []
    for k, turn in enumerate(turns[: upto + 1]):
        messages.append(_user(turn))
        if k < upto or answer_last:
            messages.append(_assistant(turn))
    return messages


def _rng(name: str, seed: int, stream: int = 0) -> np.random.Generator:
    # mix in the dataset name (and train/eval stream) so that same-seed draws are independent
    return np.random.default_rng([seed, zlib.crc32(name.encode()), stream])


def generate_dataset(name: str, n_samples: int, seed: int) -> list[dict]:
    """Rows of the PREPARED schema: one per sample and turn. A smaller n gives a prefix."""
    make = DATASETS[name]
    rng = _rng(name, seed)
    rows = []
    for i in range(n_samples):
        turns = make(rng)
        for k in range(len(turns)):
            scenes = [s for t in turns[: k + 1] for s in t.scenes]
            encoded = [_scene_png(s) for s in scenes]
            rows.append(
                {
                    "sample_id": f"{name}-{i:05d}",
                    "turn": k,
                    "scenario": name,
                    "messages": json.dumps(conversation(turns, k, answer_last=False)),
                    "images": [png for png, _ in encoded],
                    "image_ids": [iid for _, iid in encoded],
                    "reference": turns[k].answer,
                    "qa": None,  # no judge questions (VDC's) in the toy world
                }
            )
    return rows


IMAGEGEN = "toy_imagegen"  # the image-generation scenario: a caption in, an image out
IMAGEGEN_PROMPT_STREAM = 3  # prepared prompts: a stream apart from training's and the VQ fit's


def generate_imagegen_dataset(n_samples: int, seed: int) -> list[dict]:
    """Rows of the PREPARED schema for image generation: the prompt is a caption (text only);
    `images` holds the sample's reference image (a textured rendering of the caption's scene,
    FID's real set) and `reference` the caption (CLIP score's text)."""
    rows = []
    for i, (text, image) in enumerate(imagegen_examples(n_samples, seed, IMAGEGEN_PROMPT_STREAM)):
        png = media.png_bytes(image)
        user = {"role": "user", "content": [{"type": "text", "text": text}]}
        rows.append(
            {
                "sample_id": f"{IMAGEGEN}-{i:05d}",
                "turn": 0,
                "scenario": IMAGEGEN,
                "messages": json.dumps([user]),
                "images": [png],
                "image_ids": [media.image_id(png)],
                "reference": text,
                "qa": None,
            }
        )
    return rows


def imagegen_examples(n: int, seed: int, stream: int = 1) -> Iterator[tuple[str, np.ndarray]]:
    """`n` (caption, textured image) pairs for training an image generator (`stream` 1) or
    drawing reference images (other streams)."""
    rng = _rng(IMAGEGEN, seed, stream)
    for _ in range(n):
        scene = random_scene(rng)
        yield caption(scene), render_textured(scene, rng)


def training_turns(
    scenarios: list[str],
    n: int,
    seed: int,
    style: str | None = None,
    colour_noise: float = 0.0,
    stream: int = 1,
) -> Iterator[list[Turn]]:
    """`n` training samples (their turns) cycling through `scenarios`, toy_vdesc's in the house
    `style` if one is given and with `colour_noise`. Drawn from a `stream` apart from
    generate_dataset's (0), so the same seed gives other samples (individual scenes still recur:
    the scene space is small)."""
    rngs = {name: _rng(name, seed, stream=stream) for name in scenarios}
    for i in range(n):
        name = scenarios[i % len(scenarios)]
        if name == "toy_vdesc":
            yield make_toy_vdesc(rngs[name], style=style, colour_noise=colour_noise)
        else:
            yield DATASETS[name](rngs[name])


def training_example(turns: list[Turn]) -> tuple[list[dict], list[np.ndarray]]:
    """A sample as it is trained on: messages with every turn answered (multi-turn samples come
    as one conversation with all answers), and its images."""
    messages = conversation(turns, len(turns) - 1, answer_last=True)
    return messages, [render(s) for t in turns for s in t.scenes]


def training_examples(
    scenarios: list[str], n: int, seed: int
) -> Iterator[tuple[list[dict], list[np.ndarray]]]:
    """`n` examples (messages, images) of training_turns."""
    for turns in training_turns(scenarios, n, seed):
        yield training_example(turns)
