/* pool/expandable.h: the expandable strategy's tunables and its placement
 * rule, which tests check directly (pool/expandable.c has the rest). */
#ifndef XSEG_POOL_EXPANDABLE_H
#define XSEG_POOL_EXPANDABLE_H

#include <stddef.h>
#include <stdint.h>

/* Memory is "plentiful" while at least 1/XS_PLENTIFUL of the limit is free:
 * then growth folds a request's last page into its handle, and a block may
 * pin a large handle (XS_PIN_DIV) rather than convert it. */
#define XS_PLENTIFUL 8
/* A block placed over part of a large free chunk pins it (the chunk's free
 * pages can be used in place but not reclaimed while data lives in it)
 * instead of converting it, while memory is plentiful and pinned chunks
 * total at most 1/XS_PIN_DIV of the limit, in two cases: the GPU may still
 * be using the chunk (converting would mean waiting), or the chunk has at
 * most XS_PIECE_PAGES pages (converting would re-make it as that many page
 * handles).  Otherwise a busy chunk takes fresh memory or waits, and a
 * small one is converted or spared by growing (docs/design.md, "Handle
 * sizing").  Letting small idle chunks fill pins up to a sixty-fourth of
 * the limit left rmm_uniform at 1.0127 times its peak under --lag 16
 * (1.0098 with this budget). */
#define XS_PIN_DIV 128
/* Roomy idle pins.  While the device holds at most 1/XS_ROOMY_PIN_HELD_DIV
 * of the room, a small idle chunk that the budget above has no room for
 * may still be pinned, within a second budget of 1/XS_ROOMY_PIN_DIV of the
 * room that only such pins use (xs_device_t.pinned[XS_PINS_ROOMY]); busy
 * pins keep the first budget as before.  Converting such a chunk makes a
 * handle per page, and in the first pass of the recorded training traces
 * on an H100's memory the shared budget ran out: `training` converted 24
 * chunks of 7-16 pages into some 330 page handles.  With the second
 * budget (host backend, H100's memory) its first pass makes 1,856 driver
 * calls instead of 2,529 and its second none instead of 81; every host
 * min budget stays within +0.0011.  A second budget of 1/128 saved more
 * but let the GPT-2-small training hold 3 % more under --lag 4 and 16;
 * one of 1/256, less, with `torch_gpt2_train` +0.0018 at the min budget;
 * one budget of 1/64 shared with busy pins, or no bound on what the
 * device holds, cost up to 0.009 of the peak at the min budget
 * (rmm_uniform, llm_serving under --lag 4; docs/benchmarks.md, "Roomy
 * idle pins"). */
#define XS_ROOMY_PIN_HELD_DIV 4
#define XS_ROOMY_PIN_DIV 192
/* Guests.  A free place inside a pinned chunk (one a live block holds
 * data in) strands nothing now, but a block put there carries the pin on
 * when the block that made it is freed, and the chunk's free pages stay
 * stuck for as long as some such guest lives: on the recorded ViT
 * training a pin made for an 18.47 MiB block passed to a 1.46 MiB block
 * placed in the chunk's tail, then to a 2.25 MiB one, and six pages sat
 * free and unusable at the peak where the replay ran out of memory.  So a
 * large request whose best fit lies in a pinned chunk takes, if there is
 * one, the first place outside every pinned chunk among the next
 * XS_GUEST_LOOK free blocks up in size that are at most XS_GUEST_SPAN
 * times the request.  With it, stable min budgets (host backend) fell on
 * ViT from 1.0136 to 1.0085 of the peak with a filler, on llm_serving
 * under --lag 4 from 1.0068 to 1.0006 and on the recorded ResNet-50 under
 * --lag 4 from 1.0069 to 1.0026, and on an H100 ViT's from 1.0140 to
 * 1.0089; the GPT-2 training traces rose by up to 0.0013, and ViT
 * replayed through PyTorch by 0.0013 (docs/benchmarks.md, "Guests of a
 * pin").  Looking at any size, grow_then_split rose by 0.0033; only under
 * pressure, ResNet-50's lag figure stayed where it was and rmm_uniform
 * rose by 0.0027. */
#define XS_GUEST_LOOK 16
#define XS_GUEST_SPAN 4
/* Surplus pins.  While the device holds more than 1/XS_SURPLUS_DIV above
 * the live peak (memory the workload has not needed at once so far), a
 * block may pin a large chunk of any size rather than convert it, within
 * a budget of its own of 1/XS_PIN_DIV of the limit, so that these pins do
 * not crowd out the small ones above.  This is what a repeated workload
 * meets: its second pass lands on chunks cut for other shapes, and each
 * conversion cost a release and up to five handles.  Under a cap near the
 * peak the condition holds only early in a run, before the live peak is
 * reached (docs/benchmarks.md, "Surplus pins": a quarter left
 * llm_serving's warm pass at 1.15 driver calls per 100 events, a
 * sixteenth grow_then_split's at 3.3). */
#define XS_SURPLUS_DIV 8
/* ... and only while the device holds at most 1/XS_SURPLUS_HELD_DIV of
 * the room.  A run under a budget near its final peak passes through such
 * a surplus on its way up, and a pin made there lives on to the peak:
 * failing just below its min budget, llm_serving had 92 MiB free in one
 * 128 MiB chunk so pinned at 54 % of the room (docs/benchmarks.md, "Where
 * the free memory lies at the min budget").  With the bound its min
 * budget fell from 1.0022 to 1.0006 under a filler and from 1.0020 to
 * 1.0003 under a cap (host), no trace worse by more than 0.0005, and no
 * uncapped pass with an H100's memory changed; a quarter (4) let the run
 * under --lag 16 pin busy chunks instead (1.0163), a twelfth or less cost
 * first passes up to 5 % more driver time (the results file lists 4-16:
 * benchmarks/results/host-2cpu-surplus-held.txt). */
#define XS_SURPLUS_HELD_DIV 6
/* ... and only of chunks of at most 1/XS_SURPLUS_CHUNK_DIV of the room
 * (half the surplus budget before XS_TURNED), since such a pin made on
 * the way up lives on to the peak.  Under a budget a few GiB in size this
 * leaves no large chunk to pin this way (16 pages is the small chunks'
 * limit); bounding instead the free part a pin leaves, to the same 1/256,
 * gained nothing (rmm_uniform 1.0108 under a filler, host).  rmm_uniform
 * failed just below its min budget with 48-52 MiB free in pinned chunks,
 * pins made on its way up (H100, through PyTorch).  With the bound its
 * stable min budget fell from 1.0105 to 1.0086 under a filler and from
 * 1.0120 to 1.0081 under a cap (host), from 1.0108 to 1.0089 through
 * PyTorch under a filler on an H100; no other trace moved, and with an
 * H100's memory first passes made 1 % more modelled driver time
 * (grow_then_split, llm_serving, mixed_streams; 1/160-1/224 gained less;
 * benchmarks/results/host-2cpu-surplus-pin-size.txt). */
#define XS_SURPLUS_CHUNK_DIV 256
/* Early pins.  While the device holds at most 1/XS_EARLY_HELD_DIV of the
 * room, a large idle chunk of at most 1/XS_EARLY_CHUNK_DIV of the room
 * that no budget above takes may be pinned rather than converted,
 * within a budget of its own of 1/XS_EARLY_PIN_DIV of the room
 * (xs_device_t.pinned[XS_PINS_EARLY]).  A workload far smaller than the
 * device stays in this phase, and there conversions (a release and up to
 * five handles each) were most of a first pass's driver time, where
 * PyTorch's default allocator carves its cached segments.  With an H100's
 * memory (host backend, modelled H100 driver time) the fourteen first
 * passes take 287 ms instead of 345 (grow_then_split 28.4 -> 15.3,
 * logrand 15.8 -> 10.4, ResNet-50 26.0 -> 18.5, none slower); through
 * PyTorch on an H100 grow_then_split made 892 first-pass driver calls
 * instead of 1,736, logrand 528 instead of 887.  A run under a budget
 * near its final peak passes through the phase on its way up, and a pin
 * made there may live on to the peak.  Chunks of at most 1/1024 of the
 * room are at most 16 pages, the small chunks that the budgets above
 * decide, on any room under 32 GiB, so there this bound alone changes
 * nothing (the wider one below can, from 8.5 GiB of room);
 * above it, host min budgets moved by at most +0.0003 (torch_gpt2m_train),
 * and through PyTorch on an H100 neither GPT-2 training trace's.  The room
 * is judged on a fresh look at the device, as for every pin (fresh_look in
 * expandable.c): with chunks
 * of up to 1/256 of it and the last look's room, rmm_uniform through
 * PyTorch under a filler failed at 1.0108 of its peak with 80 MiB free in
 * such pins (it fits from 1.0089 without them), because the filler came
 * after xseg's last look and the room looked 79 GiB for the first creates
 * (docs/benchmarks.md, "Early pins"). */
#define XS_EARLY_HELD_DIV 8
#define XS_EARLY_PIN_DIV 32
#define XS_EARLY_CHUNK_DIV 1024
/* ... or of a chunk of at most 1/XS_EARLY_WIDE_DIV of the room of which
 * the request leaves at most 1/XS_EARLY_CHUNK_DIV uncovered: what a pin
 * strands for the block's life is the part it leaves, and a request that
 * nearly fills a chunk strands little however large the chunk.  A random
 * workload's conversions were mostly of such chunks: rmm_uniform's first
 * pass converted forty chunks of 64-256 MiB, and with this rule (host
 * backend, an H100's memory, modelled H100 driver time) takes 12.8 ms
 * instead of 18.6, logrand 7.8 instead of 10.4, grow_then_split 14.6
 * instead of 15.3, the fourteen first passes 279.3 instead of 287.4
 * (llm_serving 11.8 instead of 10.3, none other slower); every host min
 * budget within +0.0003 (torch_gpt2s_train under a cap).  On an H100,
 * through PyTorch, rmm_uniform's first pass made 661 driver calls instead
 * of 901, logrand's 387 instead of 528, and under a filler only
 * torch_gpt2s_train's min budget moved (+0.0003 at most).  Chunks of up to
 * 1/256 of the room whatever they leave uncovered (the rule with this
 * bound alone) took 278.4 ms but left torch_gpt2s_train at 1.0034 of its
 * peak under a cap, 1.0029 before, and its first pass and GPT-2-medium's
 * 6-8 % slower; leaving up to 1/1024 uncovered of a chunk of any size,
 * the recorded ResNet-50 needed 1.0073 of its peak under a filler, 1.0018
 * before (docs/benchmarks.md, "Early pins"). */
#define XS_EARLY_WIDE_DIV 256
/* ... or of any size on a device with room for growth chunks (XS_GROWN_*
 * below: 64 GiB or more), whatever the request leaves uncovered.  There a
 * conversion of a large chunk early in a run costs a release and a handle
 * per 64 MiB made again, and cuts the chunk that the next step's request of
 * its own size would have taken whole: the recorded training trace's 98
 * MiB loss buffer, over a freed 1,572 MiB logits chunk, re-made it as 25
 * handles, and the next step grew a fifth logits chunk (14,276 MiB held on
 * an H200's room, 12,704 with this).  Host backend, four passes of the
 * fourteen traces (docs/benchmarks.md, "Early pins of any size"): first
 * passes summed 178.5 -> 158.6 ms of modelled driver time with an H200's
 * room, 219.2 -> 191.8 with an H100's, 9-13 % less at every room from
 * 72 GiB up (2 % with 64 GiB); held peaks summed 0.98-0.99 of before there
 * (grow_then_split 444 -> 282 driver calls with an H200's room).  Costs:
 * with 64-70 GiB of room the GPT-2-small training holds 58.6 GB instead of
 * 55.6, and with 64 GiB its second pass finds the device tight (less than
 * an eighth free) and makes 5,662 driver calls.  No room under 64 GiB is
 * touched, so no min budget moves. */
/* Turned-over workloads.  Once the program has handed out XS_TURNED times
 * its live peak (in all since its last new start, an empty_cache with
 * nothing live, as for XS_PACK_DIV: the peak starts again there, and a
 * process that replays one workload after another must not count the
 * earlier ones' bytes), the surplus pins' budget is 1/XS_TURNED_PIN_DIV
 * of the room instead of 1/XS_PIN_DIV.  A program that has turned its
 * peak over that often reuses memory, and the chunks its surplus pins keep
 * whole are the ones its next turn asks for again: with an H100's memory
 * (host backend) the second pass of the recorded GPT-2-small training,
 * whose 50 GiB peak never counts as settled there, made 226 driver calls
 * and re-made 9,210 MiB, and makes 6 calls and 4 MiB (through PyTorch on
 * an H100 it holds less than an eighth over its peak, and nothing
 * changes); the serving trace's second pass makes 3 calls instead of 24,
 * its first 514 instead of 773.  The budget grows, it is not withheld
 * before: pins the smaller budget allowed early in a run stay as they
 * were, and no host min budget moved by more than 0.0014.  The larger
 * budget from the start let pins made early live on to the final peak
 * (rmm_uniform needed 1.0230 of its peak at the minimum budget, 1.0115
 * before; llm_serving 1.0157 under --lag 4, 1.0006), and with no surplus
 * pin at all before the turns one made in the serving trace's first
 * plateau did (1.0074 under --lag 4; docs/benchmarks.md, "Turned-over
 * workloads"). */
#define XS_TURNED 8
#define XS_TURNED_PIN_DIV 32
/* ... and a turned-over workload's surplus pins may take chunks of up to
 * 1/XS_TURNED_CHUNK_DIV of the room instead of 1/XS_SURPLUS_CHUNK_DIV:
 * the bound was a share of the budget before the turns, and the budget
 * has grown.  The serving trace's second pass converted a 748 MiB chunk
 * (over 1/256 of an H200's room) for a 340 MiB request while the device
 * held 9.5 GiB for a live peak of 7.6: with this bound it makes 3 driver
 * calls instead of 44 and its first pass 241 instead of 317, holding
 * 9,388 MiB instead of 9,784 (host backend, an H200's room; an H100's:
 * 0 warm calls instead of 32, 9,624 MiB instead of 10,330).  Host min
 * budgets did not move (filler, cap and filler with lag 4, 8 and 16, all
 * fourteen traces): under a budget near the peak the device does not
 * hold a surplus once it holds a sixth of the room.  Over the fourteen
 * traces' four passes at seven rooms from 16 to 140 GiB, held peaks moved
 * by -0.33 % to +0.29 % in sum (llm_serving +6 % with 100,000 MiB,
 * grow_then_split +2.3 % with 64 GiB, the GPT-2 inference +64 MiB with 24
 * GiB) and first passes took as long or less.  A bound of 1/64, half the
 * turned budget, left llm_serving with 64 GiB of room making 38 driver
 * calls in its fourth pass; 1/32 changed nothing more
 * (docs/benchmarks.md, "Larger surplus pins once turned"). */
#define XS_TURNED_CHUNK_DIV 128
/* Settled workloads.  Once the live peak has held (risen by at most
 * 1/XS_SETTLE_RISE, device.h) while the program handed out
 * XS_SETTLE_TURNS times that peak, on a device with room for
 * XS_SETTLED_ROOM times it and for XS_SETTLED_ROOM times what the device
 * holds, the workload is taken to repeat, and surplus
 * pins may fill 1/XS_SETTLED_PIN_DIV of the room, with or without a
 * surplus: the second pass of grow_then_split made 146 driver calls for
 * 6,904 events with 1/128, none with 1/16 (host backend, an H100's
 * memory), and without the surplus condition the first pass of the
 * recorded ViT training made 1,212 calls instead of 3,171 and held 5,020
 * MiB instead of 5,612.  A peak that held for a while can still rise, and
 * pins made below it may live on to the new peak: with no room bound,
 * llm_serving (whose live peak held at 46 % of its final one) needed
 * 1.0109 of its peak under --lag 16 where it had needed 1.0022, and with
 * room for 1.25 or 1.5 times the peak mixed_streams needed 1.0054 or
 * 1.0038 where it needs 1.0012.  A workload whose peak passes half the
 * room stops counting as settled, and chunks it pinned while its peak
 * was low are cut in its next pass instead: with an H100's memory the
 * recorded GPT-2-medium training makes 6,156 calls in its first pass
 * instead of 7,333, but 254 in its second instead of 64
 * (docs/benchmarks.md, "Settled workloads").  The bound on what the device
 * holds keeps a plateau that fills half the room with its slack from
 * counting: under --lag 4 and a 7,444 MiB budget the serving trace's
 * first plateau held 4,142 MiB for a live peak of 3,425, and with surplus
 * pins withheld there (a variant not taken, XS_TURNED) a settled pin made
 * on it stranded 48 MiB at the final peak, where a 544 MiB request
 * lacked 18.
 * Such a large workload still pins once its peak has held, within the
 * surplus budget (XS_PIN_DIV, XS_TURNED_PIN_DIV), while the peak and the
 * chunk leave 1/XS_ROOMY_DIV of the room free: the second pass of the
 * recorded GPT-2-medium training (59 GiB live, an H100's memory, host
 * backend) makes 6 driver calls instead of 242, its third none instead of
 * about 60, and the GPT-2-small one's first pass 4,047 instead of 4,738
 * but its second 78 instead of 47 (203 instead of 6 on an H100: it cuts
 * what its first pass pinned, the budget being full); the largest
 * min-budget change is +0.0011 (torch_gpt2_train).  Leaving only an
 * eighth free, pins made on a plateau below the final peak lived on to
 * it: mixed_streams +0.0021 under a cap; judged by what the device holds
 * rather than the peak, torch_gpt2s_train +0.0020 to +0.0036. */
#define XS_SETTLE_TURNS 2
#define XS_SETTLED_PIN_DIV 16
#define XS_SETTLED_ROOM 2
/* Nearly covered chunks.  On a settled workload, a request that covers
 * all of a large idle chunk but at most XS_COVERED_PAGES pages, and at
 * most 1/XS_COVERED_DIV of it (as a fold takes at most 1/XS_FOLD_DIV of
 * a request), pins the chunk instead of converting it, within a budget
 * of its own of 1/XS_SETTLED_PIN_DIV of the room: the pin strands those
 * few pages for the block's life, where the conversion releases the
 * whole chunk and re-makes it as dozens of handles.  The recorded
 * GPT-2-small training's second pass with an H200's room re-made a 1,572
 * MiB chunk as 27 handles for a 3,141 MiB request that left 7 MiB of it
 * uncovered (the surplus budget was full); it now makes 6 driver calls
 * instead of 92 and holds 55,370 MiB instead of 58,512 (host backend).
 * Nothing else moved over the fourteen traces' four passes at eight
 * rooms from 16 to 176 GiB; without the 1/64 bound (in a first version
 * charged to the surplus budget) chunks of 16-128 MiB were pinned too,
 * and with 16 GiB of room grow_then_split held 11 % more and made 329
 * driver calls in its fourth pass instead of 113 (docs/benchmarks.md,
 * "Nearly covered chunks"). */
#define XS_COVERED_PAGES 4
#define XS_COVERED_DIV 64
/* A converted chunk of more than XS_PIECE_PAGES pages becomes at most five
 * pieces, a smaller one single pages, which never convert again
 * (docs/design.md, "Handle sizing").  Pieces for chunks of 5-16 pages far
 * from the limit cut the host model's first-pass driver time on the
 * recorded GPT-2-medium training by 17 %, but not an H100's (97.5 -> 95.8
 * ms, fastest of eight), and lengthened the whole-chunk search of later
 * passes (docs/benchmarks.md, "Small chunks in pieces"). */
#define XS_PIECE_PAGES 16
/* A conversion makes each part of the chunk it cuts (pieces()) as handles
 * of at most XS_PIECE_CAP bytes.  Re-making a chunk costs about 1-1.4 us
 * per MiB of it on an H100 (the release and the creates), a handle about
 * 50 us whatever its size; as one handle, the rest of a large chunk was
 * made again by every smaller request that cut it next (the first pass of
 * torch_gpt2s_train made 127,950 MiB of handles for a live peak of 51,317
 * MiB; 86,338 with the cap, on an H100).  A growth still maps one handle,
 * as cudaMalloc.  64 MiB made fewer bytes still, but left one min budget
 * 0.010 higher (docs/benchmarks.md, "Capped pieces"): under pressure the
 * cap stays at 128 MiB. */
#define XS_PIECE_CAP ((size_t)128 << 20)
/* While the device holds at most 1/XS_PIECE_ROOMY_DIV of the room,
 * pieces are made of at most XS_PIECE_CAP_ROOMY bytes instead: a rest cut
 * again re-makes half as much, and under a cap near the peak only a run's
 * early part is that roomy, so min budgets barely move.  With an H100's
 * memory on the host backend every trace's modelled first-pass driver
 * time was at or below that of 128 MiB pieces (grow_then_split 0.85x,
 * logrand 0.86x; 361 -> 342 ms over the 14 traces), min budgets within
 * +0.0017; on an H100 the C program's first passes took 0.86-0.93x the
 * driver time on four traces.  On any plentiful device (no bound on what
 * it holds) the GPT-2-medium training, 60 GiB live on 80, made 178 driver
 * calls in its second pass instead of 106: there later passes cut what
 * the first left, and smaller pieces are more handles to re-make
 * (docs/benchmarks.md, "Smaller pieces while memory is plentiful"). */
#define XS_PIECE_CAP_ROOMY ((size_t)64 << 20)
#define XS_PIECE_ROOMY_DIV 2
/* Under pressure, a piece before or after the block of more than
 * XS_GIVE_BACK_PAGES pages is not made again but given back to the driver:
 * made again at once it needs the memory the driver is still scrubbing
 * after the release (a 6-8 ms wait on an H100), and a large rest is
 * converted again by the next request that covers part of it.  Every
 * rest given back raised host min-budgets under a filler by up to 0.0064,
 * rests of more than 64 pages by up to 0.0037, more than 128 by up to
 * 0.0045, more than 256 by at most 0.0016 (docs/benchmarks.md, "Large
 * rests given back"). */
#define XS_GIVE_BACK_PAGES 256
/* A conversion while memory is plentiful, on a device with room for growth
 * chunks (a room of 64 GiB or more), keeps the handle it cuts in the cache
 * instead of releasing it when that handle is at least XS_KEEP_CUT_MIN
 * bytes and the cache then holds at most 1/XS_KEEP_CUT_DIV of the room: a
 * later growth of at least its size maps it again (no create, and no
 * release now: a release costs about 0.38 us per MiB on an H200), and a
 * smaller growth whose create is refused for want of memory releases it and
 * tries again (chunk_for), so it costs no memory.  The recorded GPT-2-small
 * training cuts its 1,572 MiB logits chunk twice at 27 GB held; with an
 * H200's room its first pass took 36.4 ms of modelled driver time instead
 * of 39.2 and held 55,464 MiB instead of 55,944 (with 180,000 MiB, 52,682
 * instead of 56,624), and no other trace moved at any room.  Kept down to
 * 256 MiB, handles also lay unused in the cache to the peak (with 64 GiB,
 * llm_serving +726 MiB held); of any size, logrand +464 MiB and training
 * +1,702 with an H100's room (docs/benchmarks.md, "Keeping the handle a
 * conversion cuts"; on an H200 through PyTorch 33.45 ms of driver time a
 * first pass against 34.37). */
#define XS_KEEP_CUT_MIN ((size_t)1 << 30)
#define XS_KEEP_CUT_DIV 64
/* A growth while memory is plentiful takes the rest of its last page into
 * its one handle when that rest is at most 1/XS_FOLD_DIV of the request,
 * except while the pool packs (XS_PACK_DIV).  The folded rest stays with
 * the block for its life: a sixteenth left a recorded GPT-2 inference at
 * 1.022 times its peak, a sixty-fourth bounds that waste to 1.6 %
 * (docs/design.md, "Handle sizing"). */
#define XS_FOLD_DIV 64
/* Growing instead of converting.  A request whose best fit covers a large
 * free chunk in part, and that fits no whole chunk, takes fresh memory
 * (one or two handles) and leaves the chunk whole, instead of re-making
 * the chunk as smaller handles (an unmap and a release, then a create, map
 * and set-access per piece), when all of these hold:
 *   - at least 1/XS_ROOMY_DIV of the limit stays free after the growth;
 *   - the device then holds at most 1/XS_SLACK_DIV more than the most
 *     bytes live at once since the last new start (an empty_cache with
 *     nothing live, as for XS_PACK_DIV);
 *   - the bytes live with the request are within 1/XS_NEAR_PEAK_DIV of
 *     that peak.
 * (Where the first fails, see XS_NEAR_ROOM_MIN below.)
 * The chunk it spared is wholly free, so reclaim can still take it: the
 * memory is held, not stranded.  The first bound keeps min-budget runs as
 * they were, the second bounds what an uncapped program holds, and the
 * third keeps repeating workloads settling: growing far below the peak
 * kept putting back whole chunks that later passes converted (a repeated
 * random-size workload still converted in its eighth pass).  The slack is
 * a thirty-second: with an eighth, ResNet-50 with changing shapes held
 * 1.12 times its live peak (10,134 MiB for 9,030) against 1.03 before the
 * rule; with a sixteenth 1.06; with a thirty-second 1.03, and the first
 * pass of a recorded GPT-2-medium training step still makes 8,661 driver
 * calls instead of 10,521 (H100, docs/benchmarks.md).
 * docs/design.md, "Handle sizing", has the measurements. */
#define XS_ROOMY_DIV 4
#define XS_SLACK_DIV 32
#define XS_NEAR_PEAK_DIV 8
/* Growing near the room.  Where a growth would leave less than
 * 1/XS_ROOMY_DIV of the room free, but memory is still plentiful (at least
 * 1/XS_PLENTIFUL free), a request of at least XS_NEAR_ROOM_MIN bytes that
 * brings the live bytes within 1/XS_NEAR_ROOM_PEAK_DIV of the live peak
 * grows instead of converting, with no bound on holdings over that peak,
 * once that peak fills 1/XS_NEAR_ROOM_FILL_DIV of the room.  What the
 * device then holds is bounded by the room; and the chunk left whole stays
 * a whole handle that reclaim can move to wherever the next large request
 * needs pages, where a converted chunk leaves the pages its block shares
 * with the free rest.  The recorded ResNet-50 with changing shapes needed
 * 1.0080 of its peak under a filler with no lag but 1.0018-1.0029 with any
 * (a busy chunk took fresh memory): with the rule, host backend, 1.0018
 * under a filler and 1.0015 under a cap (1.0077 before), and 1.0019
 * through PyTorch on an H100 (1.0081 before, expandable segments 1.0074);
 * no trace worse by more than 0.0013 (host, four modes), logrand better by
 * up to 0.0013, and no uncapped pass with an H100's memory changed.
 * For any size the GPT-2-small inference needed 1.0090 instead of 1.0064;
 * without the window at the peak the GPT-2-medium training's later passes
 * held 2 GiB more on an H100's memory; judged by what the device holds (a
 * quarter of the room) instead of by the peak, a 24 GiB device
 * held 21,524 MiB for rmm_uniform's 8,192 MiB peak instead of 11,258
 * (docs/benchmarks.md, "Growing near the room"). */
#define XS_NEAR_ROOM_MIN ((size_t)8 << 20)
#define XS_NEAR_ROOM_FILL_DIV 2
#define XS_NEAR_ROOM_PEAK_DIV 32
/* Sparing a large chunk.  Converting a free chunk of C bytes that a
 * request covers in part costs its release (about 0.38 us per MiB on an
 * H200) and a create, map and set access per piece of at most 64 MiB made
 * again (38 us each): about 1 us per MiB, 3 ms for the 3 GiB chunk of a
 * GPT-2 step's logits, where growing the request costs one or two
 * handles.  So a request whose best fit covers in part a chunk of at
 * least XS_SPARE_MIN bytes and at least XS_SPARE_RATIO times its own pages
 * grows instead, far below the live peak too, while
 *   - at least 1/XS_ROOMY_DIV of the room stays free after the growth;
 *   - the room holds XS_SPARE_ROOM times the live peak with the request;
 *   - the device then holds at most 1/XS_SPARE_SLACK_DIV more than the
 *     live peak.
 * The chunk stays wholly free, so reclaim can take it: held, not
 * stranded.  Host backend, four passes of all fourteen traces at eight
 * rooms (docs/benchmarks.md, "Sparing large chunks"): first-pass driver
 * time of the recorded GPT-2-small training with an H200's room 45.3 ->
 * 40.2 ms, GPT-2 training 13.4 -> 11.9, at 2.7 % more held for the first;
 * every min budget within 0.0002 (filler, cap, and filler with lag 8).
 * Without the size bound (any chunk twice the request) the first pass of
 * the GPT-2-small training fell further (38.2 ms), but logrand's min
 * budget rose by 0.0026 and ResNet-50's by 0.0022; with a slack of a
 * thirty-second nothing changed, with an eighth the held peaks rose more. */
#define XS_SPARE_MIN ((size_t)256 << 20)
#define XS_SPARE_RATIO 2
#define XS_SPARE_ROOM 2
#define XS_SPARE_SLACK_DIV 16
/* A pool packs its blocks (shares a neighbour's page whenever that needs no
 * more new pages) while less than 1/XS_PACK_DIV of the bytes it has handed
 * out have come back: what a program allocates before it frees anything is
 * mostly state that lives to the end, such as a model's weights
 * (docs/design.md, "Placement").  The count starts again when the cache is
 * emptied (xseg_empty_cache) with nothing live: that is a new start.  The
 * small pool's count starts again too whenever a free leaves nothing live
 * (exp_note_free): a program that runs its workload again without
 * empty_cache then packs its small blocks as the first run did, where
 * they had been placed as on a pool that no longer packs (recorded ViT
 * training's second run grew six small pages, 18 driver calls; none since,
 * and no host min budget moved).  Not the large pool's: random traces pass
 * through nothing live early on, and packing after it cost them (logrand
 * 1.0105 -> 1.0131); with an H100's room the GPT-2-small training's second
 * run then made 538 driver calls instead of 163 (docs/benchmarks.md,
 * "Refilling an emptied device"). */
#define XS_PACK_DIV 16
/* Growing ahead of the GPU.  A request whose place covers in part a large
 * free chunk that the GPU may still be using pins it within the pin
 * budget, else takes fresh memory, else waits for the GPU and converts
 * the chunk.  On a device with room for more than XS_AHEAD_ROOM times the
 * live peak (the request counted), fresh memory is taken only while the
 * device then holds at most 1/XS_AHEAD_DIV above that peak; beyond it the
 * request waits.  Without the bound a job small beside its GPU held as
 * much more as the GPU ran behind: DDP on two H100s, 4.3 GB live a rank,
 * held up to 8,224-9,152 MiB a rank against 5,992 with PyTorch's default
 * allocator, and 5,518-5,768 with the bound, at the same step time (a few
 * waits a run; docs/benchmarks.md, "Several devices").  On a device the
 * job nearly fills, growth is bounded by the room, and the bound is off:
 * it moved a min-budget run (llm_serving under --lag 4, 1.0006 -> 1.0041). */
#define XS_AHEAD_DIV 4
#define XS_AHEAD_ROOM 2
/* Growth chunks.  On a device with room for XS_GROWN_ROOM_DIV chunks of
 * XS_GROWN_CHUNK bytes, while it holds at most 1/XS_EARLY_HELD_DIV of the
 * room, a large request of at most 1/XS_GROWN_SPAN of such a chunk that
 * no free block fits maps one chunk of that size and takes its start; the
 * rest is a free block that the next requests fill with no driver call,
 * as PyTorch's default allocator carves its 20 MiB segments.  The block
 * pins the chunk (the pin passes to the chunk's other live blocks, as
 * every pin), within a budget of 1/XS_GROWN_PIN_DIV of the room
 * (xs_device_t.pinned[XS_PINS_GROWN]); once idle, such a chunk is pinned
 * again in that budget by a request of at most 1/XS_GROWN_SPAN of it
 * (may_pin_regrown in expandable.c).  A first pass grew a handle or two
 * per request there (grow_then_split's second phase: about 100 growths of
 * 1-16 MiB blocks after its first phase's memory was reused).  With an
 * H200's room (host backend, modelled driver time) the fourteen first
 * passes take 200.6 ms instead of 234.6 (grow_then_split 13.2 -> 8.9,
 * ResNet-50 17.3 -> 13.3, the GPT-2 inference 2.4 -> 1.0; llm_serving 7.6
 * -> 8.8 and rmm_uniform 7.3 -> 7.7 slower), with an H100's 247.8 instead
 * of 277.4 (252.9 with the small idle pins below).  Below 64 GiB of
 * room nothing changes, so no min budget of a shipped trace moves. Costs:
 * the recorded training trace held 14,276 MiB from its second pass instead
 * of 12,704 (a 1,570 MiB request found no free range long enough, though no
 * chunk was pinned then; 12,704 again since a run follows the last run's
 * places, XS_RERUN_* below), and with an
 * H100's room the GPT-2-small training's second pass makes 584 driver calls
 * instead of 64 (1.5 per 100 events).  Budgets of 1/256 and 1/512 gained
 * less (0.93-0.98 of the base's time) and cost the same on the training
 * trace; 1/64 held up to 17 % more on grow_then_split; chunks of 16-32 MiB
 * or requests of up to a half or a quarter of them gained less; growth
 * chunks only while the pool packs, or never then, gained less
 * (docs/benchmarks.md, "Growth chunks").
 * A small idle chunk that neither the shared nor the roomy budget has
 * room for may be pinned in what growth chunks leave of theirs: with an
 * H100's room the GPT-2-small training's second pass found the shared
 * budget full while no growth chunk was pinned, and cut 6-12 page chunks
 * into single pages (584 driver calls; 163 with this, training's 53 -> 3,
 * GPT-2-medium's 85 -> 44, its first pass 66.8 -> 71.3 ms; nothing moved
 * with an H200's room).
 * The budget was 1/128 of the room, and the recorded GPT-2-medium
 * training spent it in its first few hundred requests, then grew a handle
 * per 4-16 MiB activation (943 growths with an H200's room).  With 1/32
 * and idle chunks pinned again, its first pass makes 2,309 driver calls
 * instead of 3,107 with an H200's room (host; 0.89 of the time, paired,
 * through PyTorch on an H200) and `training` 587 instead of 1,322; first
 * passes summed 190.5 -> 176.4 ms
 * modelled (262.0 from 312.4 with 64 GiB, 219.2 from 241.4 with an
 * H100's); GPT-2-small 40.2 -> 42.0 ms.  Costs: held peaks up to 3.3 GB
 * higher on some traces and rooms (GPT-2-small with 100,000 MiB;
 * `training` +1,572 MiB on an H200 (none since early pins of any size,
 * above), mixed_streams +736 with an H100's
 * room).  Pinning again is the smaller part: without it the GPT-2-small
 * training's first pass took 43.7 ms instead of 42.0 (the next step's
 * requests cut idle growth chunks into three handles each).  No room
 * under 64 GiB is touched (docs/benchmarks.md, "A larger budget for
 * growth chunks"). */
#define XS_GROWN_CHUNK ((size_t)64 << 20)
#define XS_GROWN_SPAN 4
#define XS_GROWN_ROOM_DIV 1024
#define XS_GROWN_PIN_DIV 32
/* Growth chunks in a streak.  While a program only allocates (no large
 * block freed since the streak began: a phase that grows) and the pool
 * does not pack, a growth chunk is twice the size it would be, up to
 * XS_GROWN_STREAK_MAX, as long as it is at most 1/XS_GROWN_STREAK_DIV of
 * the growth chunks made in the streak and fits their budget: 64, 64, 64,
 * 64, 128, 128, 256, 256, ... MiB (xs_device_t.grown_streak; a large free
 * or a new start ends the streak).  grow_then_split's second phase grows
 * 4 GiB of 1-128 MiB blocks with nothing freed: with an H200's room
 * (host backend, modelled H100 driver time) its first pass makes 219
 * driver calls instead of 282 (5.5 -> 4.8 ms) and holds 7,174 MiB instead
 * of 7,276 (PyTorch's default 7,950); through PyTorch on an H200 the same
 * calls and memory, and 0.91 of the base's measured driver time (median
 * of 20 first passes).  No other trace moves but GPT-2-medium with
 * 180,000 MiB (1,805 -> 1,769 calls); first passes summed 158.5 -> 157.8
 * ms with an H200's room, 191.8 -> 189.7 with an H100's, 256.2 -> 254.1
 * with 64 GiB, held peaks lower at every room, min budgets equal (below
 * 64 GiB nothing changes; traces scaled to ~96 GiB: GPT-2-medium 1.0038
 * -> 1.0035, the rest equal).  Doubling while the pool packs too (a
 * model's set-up) moved training and the GPT-2 traces as well (training
 * 507 -> 459 calls with an H200's room, GPT-2-medium's second pass with
 * 64 GiB 4,801 -> 18) but cost the GPT-2-small training 0.0019 of its
 * peak scaled under a cap (1.0033 -> 1.0052): what a packing pool hands
 * out lives to the end, and pins a larger chunk's rest as long.  A
 * ceiling of 512 MiB held more (grow_then_split 7,334 MiB); doubling at
 * the whole streak instead of half of it held up to 3.3 GB more on the
 * GPT-2-small training; chunks for requests over 16 MiB in a streak
 * changed nothing (those requests extend a run already mapped)
 * (docs/benchmarks.md, "Growth chunks in a streak"). */
#define XS_GROWN_STREAK_DIV 2
#define XS_GROWN_STREAK_MAX ((size_t)256 << 20)
/* Running again (docs/design.md, "Running again").  Each large request's
 * place is logged, up to XS_RERUN_CAP a run (16 bytes each; a log starts
 * at XS_RERUN_FIRST places and doubles as needed), and the logs of the last
 * XS_RERUN_LOGS runs that made large requests are kept (xs_rerun_t in
 * device.h).  Once a free leaves nothing live, the next run follows the
 * latest log that began with its first size: each request takes the place of the log's request of the
 * same ordinal while the sizes match, where that place lies in a free
 * mapped block (looked for among the XS_RERUN_LOOK blocks up from its size
 * and the XS_RERUN_LOOK largest); an idle chunk it covers in part is
 * pinned in the budget charged last time, whatever that budget holds, as
 * long as the pins of every budget then hold at most 1/XS_RERUN_PIN_DIV of
 * the room (at most 0.08 in the passes of the shipped traces at rooms of
 * 16-143 GiB) and memory is plentiful.
 * With an H100's room (80 GiB) or more every later run of the fourteen
 * shipped traces holds its first run's peak and calls the driver nowhere
 * (host backend, and an H200): the GPT-2-medium training's later runs
 * held up to 64,102 MiB against 61,122, ResNet-50's up to 9,312 against
 * 9,160 with an H100's room, eight traces called the driver in their
 * second run.  The fourth runs' held peaks summed over the traces are 0.977-0.995 of what
 * they were at every room from 16 GiB, every first run and min budget is
 * unchanged, and a warm pass takes 0.50-1.00 of its time (host, H200's
 * room).  With 24 and 40 GiB of room too, every later run of every trace
 * that leaves an eighth of the room free holds its first run's peak with
 * no driver call (docs/benchmarks.md, "Running again"). */
#define XS_RERUN_CAP 32768
#define XS_RERUN_FIRST 256
#define XS_RERUN_LOOK 32
#define XS_RERUN_PIN_DIV 8

/* Shared pages that empty together.  Of two large blocks that shared a
 * page, the one freed second is counted together if it went within
 * XS_TOGETHER_FREES large frees after the first, else apart
 * (both counts halved at XS_TOGETHER_WINDOW).  From XS_TOGETHER_MIN pages
 * on, while fewer than 1/XS_TOGETHER_DIV of them went apart, the large
 * pool places as it does while packing: the program frees neighbours
 * together (a training step's activations, freed in the backward pass in
 * the reverse of their order), so a shared page strands nothing, and
 * blocks lie back to back.  A new start (xs_empty_cache with nothing live)
 * drops both counts. */
#define XS_TOGETHER_FREES 32
#define XS_TOGETHER_WINDOW 256
#define XS_TOGETHER_MIN 32
#define XS_TOGETHER_DIV 2

/* Small blocks in large pages, on a small device.  While the room (the
 * cap, or the device less what others hold) is at most XS_GAP_ROOM_PAGES
 * pages and the small pool packs, a small request that no small-pool
 * free block fits takes the free bytes of a large-pool page that a live
 * block holds in part (a free block's head or tail, beside its live
 * neighbour), if they fit it, rather than a page of its own: on a budget
 * of a few hundred pages a page is a share of it worth keeping, and
 * while the pool packs, what is allocated is likely to live to the end.
 * The block counts in the large pool's statistics, where it lies.  The
 * recorded Llama generation (a 263 MiB peak) then needs 1.0199 of its
 * peak under a filler and 1.0123 under a cap, against 1.0275 and 1.0199
 * (host backend, stable min budgets); no other shipped trace moves.  On
 * any device, or under pressure at any size, it cost up to 0.0127
 * (grow_then_split, ViT and GPT-2-small inference, whose small blocks
 * outlived their large neighbours and held whole pages each;
 * docs/benchmarks.md, "Small blocks in large pages"). */
#define XS_GAP_ROOM_PAGES 512

/* Where to place `size` bytes in the free range [f0, f1), whose ends, where
 * not page-aligned, share their pages with live data: the start with the
 * least expected stranded memory (docs/design.md, "Placement").  Looks at
 * both ends of the range, or (both 0) only its low end.  pack: the
 * neighbours are taken to live to the end (the pool packs). */
uintptr_t xs_exp_place(size_t page, uintptr_t f0, uintptr_t f1, size_t size, int both, int pack);

#endif /* XSEG_POOL_EXPANDABLE_H */
