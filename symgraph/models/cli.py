"""Write a model-zoo network as MXNet symbol JSON.

    symgraph zoo                                  list the names
    symgraph zoo vgg16 -o vgg16.json              write the file
    symgraph zoo resnet-cifar-56 --classes 100    print the JSON
    symgraph zoo ssd-300-vgg16 --mode deploy -o ssd.json   an SSD ending in detections

The file loads in symgraph (`symgraph plan vgg16.json --shape
data=64,3,224,224`) and in MXNet (`mx.sym.load`).
"""
from __future__ import annotations

from ..util import atomic_write_text


def add_arguments(parser) -> None:
    parser.add_argument("name", nargs="?", help="model name; leave out to list them")
    parser.add_argument("-o", "--output", metavar="NET.json",
                        help="write the symbol JSON here (default: print it)")
    parser.add_argument("--classes", type=int, metavar="N",
                        help="number of classes (default: the model's own, 1000 for ImageNet)")
    parser.add_argument("--image-shape", metavar="C,H,W",
                        help="input image shape (default: the model's own, e.g. 3,224,224); "
                             "it changes the structure where MXNet's files do")
    parser.add_argument("--mode", choices=("train", "deploy"),
                        help="SSD detectors only: the training symbol (default; reads data "
                             "and label) or the deploy one ending in MultiBoxDetection")


def run(args) -> int:
    from . import get_model, list_models, model_info
    if not args.name:
        if args.output or args.classes is not None or args.image_shape or args.mode:
            from ..cli import UsageError
            raise UsageError("symgraph zoo: give a model name with -o/--classes/--image-shape/"
                             "--mode")
        width = max(len(n) for n in list_models())
        for name in list_models():
            info = model_info(name)
            shape = ",".join(str(d) for d in info.image_shape)
            print(f"{name:<{width}}  {shape:<10}  {info.doc}")
        print("(any depth: resnet-N, resnet-v1-N, resnet-cifar-N, resnet-v1-cifar-N)")
        return 0
    if args.output:
        from ..cli import check_output_folder
        check_output_folder(args.output)  # a mistyped folder is an error, not made
    options = {}
    if args.mode:
        if not model_info(args.name).detector:
            from ..cli import UsageError
            raise UsageError(f"symgraph zoo: --mode is for the SSD detectors; {args.name} "
                             f"is a classifier")
        options["mode"] = args.mode
    net = get_model(args.name, num_classes=args.classes, image_shape=args.image_shape,
                    **options)
    text = net.tojson()
    if args.output:
        atomic_write_text(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text)
    return 0
